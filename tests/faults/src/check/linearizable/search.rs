//! The Wing–Gong search (as in Knossos's WGL checker and porcupine) over one register's ops:
//! a depth-first search for an order of the ops that respects real time and that a single
//! register could have produced. An op may come next only if it is *minimal*, i.e. no other op
//! still waiting completed before it was invoked. A cache of (ops done, register value) prunes
//! every state reached before.
//!
//! Two further prunings keep real histories, where many writes overlap, near-linear; both keep
//! every branch that could still succeed:
//! - A minimal read that matches the register is taken at once, without trying anything else
//!   first: moving it to the front of any order that works still gives an order that works.
//! - A write may not overwrite a value that can never come back (one no other write produces,
//!   or the empty register) while a read of that value still waits.

use crate::history::Micros;
use std::collections::{BTreeMap, HashSet};

/// One op on the register, as the search sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    pub invoke: Micros,
    pub complete: Micros,
    pub action: Action,
    /// An op that may never have taken effect (a write whose outcome is unknown): the search
    /// may drop it instead of applying it.
    pub optional: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Action {
    Write(u64),
    /// `None`: the register was empty.
    Read(Option<u64>),
}

/// How far the search got before it could go no further.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Frontier {
    /// How many ops the deepest partial order held.
    pub linearized: usize,
    /// The register's value at that point.
    pub state: Option<u64>,
    /// The last few ops of that order, oldest first, each with whether it was applied (`false`:
    /// an optional write dropped).
    pub tail: Vec<(usize, bool)>,
    /// The ops that could have come next by real time; none of them fitted.
    pub stuck: Vec<usize>,
    /// The reads still waiting for the register's value when that value could never come back
    /// once overwritten: why no write could come next.
    pub stranded: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verdict {
    Linearizable,
    Not(Frontier),
    /// The search visited its whole budget of states without deciding.
    GaveUp,
}

/// How many ops of the deepest order a [`Frontier`] keeps.
const TAIL: usize = 4;

/// Searches for a linearization of `entries`, starting from an empty register, visiting at most
/// `budget` states. Indices in the verdict refer to `entries`.
pub(super) fn search(entries: &[Entry], budget: u64) -> Verdict {
    if entries.is_empty() {
        return Verdict::Linearizable;
    }
    let mut register = Register::new(entries);
    let mut seen: HashSet<(Bits, Option<u64>)> = HashSet::new();
    let mut steps = 0u64;

    let root = register.minimal();
    let mut best = register.frontier(None, &root);
    let mut stack = vec![Frame::new(register.moves(&root, None), None)];

    // Each frame but the root was entered by the move at the same depth of `register.path`.
    while let Some(top) = stack.last_mut() {
        let Some(&step) = top.moves.get(top.next) else {
            stack.pop();
            register.undo();
            continue;
        };
        top.next += 1;
        let after = match (step.apply, register.sorted[step.entry].action) {
            (true, Action::Write(value)) => Some(value),
            _ => top.state,
        };
        register.done.set(step.entry);
        let fresh = seen.insert((register.done.clone(), after));
        register.done.clear(step.entry);
        if !fresh {
            continue;
        }
        steps += 1;
        if steps > budget {
            return Verdict::GaveUp;
        }
        register.apply(step);
        if register.path.len() == entries.len() {
            return Verdict::Linearizable;
        }
        let next = register.minimal();
        if register.path.len() > best.linearized {
            best = register.frontier(after, &next);
        }
        stack.push(Frame::new(register.moves(&next, after), after));
    }
    Verdict::Not(best)
}

/// One way to extend the order: take `entry` next, applying it or (for an optional write)
/// dropping it.
#[derive(Debug, Clone, Copy)]
struct Move {
    entry: usize,
    apply: bool,
}

/// A point in the search: the register's value there and the moves still to try from it.
#[derive(Debug)]
struct Frame {
    state: Option<u64>,
    moves: Vec<Move>,
    next: usize,
}

impl Frame {
    fn new(moves: Vec<Move>, state: Option<u64>) -> Self {
        Self {
            state,
            moves,
            next: 0,
        }
    }
}

/// The ops in invoke order and the partial order built so far.
#[derive(Debug)]
struct Register<'a> {
    /// The entries sorted by invoke, which lets `minimal` stop at the first op invoked too late.
    sorted: Vec<&'a Entry>,
    /// `sorted[i]` is the caller's `entries[order[i]]`.
    order: Vec<usize>,
    /// Values that can never come back once overwritten.
    once: HashSet<Option<u64>>,
    /// How many reads of each value are not yet ordered.
    waiting_reads: BTreeMap<Option<u64>, usize>,
    done: Bits,
    path: Vec<Move>,
}

impl<'a> Register<'a> {
    fn new(entries: &'a [Entry]) -> Self {
        let mut order: Vec<usize> = (0..entries.len()).collect();
        order.sort_by_key(|&i| (entries[i].invoke, entries[i].complete));
        let sorted: Vec<&Entry> = order.iter().map(|&i| &entries[i]).collect();
        let mut writers: BTreeMap<u64, usize> = BTreeMap::new();
        let mut waiting_reads = BTreeMap::new();
        for entry in &sorted {
            match entry.action {
                Action::Write(value) => *writers.entry(value).or_default() += 1,
                Action::Read(value) => *waiting_reads.entry(value).or_default() += 1,
            }
        }
        let mut once: HashSet<Option<u64>> = writers
            .into_iter()
            .filter(|&(_, count)| count == 1)
            .map(|(value, _)| Some(value))
            .collect();
        once.insert(None);
        Self {
            done: Bits::new(sorted.len()),
            sorted,
            order,
            once,
            waiting_reads,
            path: Vec::new(),
        }
    }

    /// The ops not yet ordered that no other op not yet ordered completed before.
    fn minimal(&self) -> Vec<usize> {
        let waiting = || (0..self.sorted.len()).filter(|&i| !self.done.get(i));
        let Some(first_complete) = waiting().map(|i| self.sorted[i].complete).min() else {
            return Vec::new();
        };
        waiting()
            .take_while(|&i| self.sorted[i].invoke <= first_complete)
            .collect()
    }

    /// The moves among `candidates` worth trying when the register holds `state`.
    fn moves(&self, candidates: &[usize], state: Option<u64>) -> Vec<Move> {
        let read_fits = |entry: &&usize| self.sorted[**entry].action == Action::Read(state);
        if let Some(&entry) = candidates.iter().find(read_fits) {
            return vec![Move { entry, apply: true }];
        }
        let overwrite_ok = self.may_overwrite(state);
        let mut out = Vec::new();
        for &entry in candidates {
            let Action::Write(_) = self.sorted[entry].action else {
                continue;
            };
            if overwrite_ok {
                out.push(Move { entry, apply: true });
            }
            if self.sorted[entry].optional {
                out.push(Move {
                    entry,
                    apply: false,
                });
            }
        }
        out
    }

    /// Whether a write may replace `state`: not if `state` can never come back while a read of
    /// it still waits.
    fn may_overwrite(&self, state: Option<u64>) -> bool {
        let still_read = self.waiting_reads.get(&state).is_some_and(|&n| n > 0);
        !(still_read && self.once.contains(&state))
    }

    fn apply(&mut self, step: Move) {
        self.done.set(step.entry);
        if let Action::Read(value) = self.sorted[step.entry].action {
            *self.waiting_reads.entry(value).or_default() -= 1;
        }
        self.path.push(step);
    }

    fn undo(&mut self) {
        let Some(step) = self.path.pop() else {
            return;
        };
        self.done.clear(step.entry);
        if let Action::Read(value) = self.sorted[step.entry].action {
            *self.waiting_reads.entry(value).or_default() += 1;
        }
    }

    /// The current point of the search, in the caller's indices.
    fn frontier(&self, state: Option<u64>, candidates: &[usize]) -> Frontier {
        let tail_start = self.path.len().saturating_sub(TAIL);
        Frontier {
            linearized: self.path.len(),
            state,
            tail: self.path[tail_start..]
                .iter()
                .map(|step| (self.order[step.entry], step.apply))
                .collect(),
            stuck: candidates.iter().map(|&i| self.order[i]).collect(),
            stranded: if self.may_overwrite(state) {
                Vec::new()
            } else {
                (0..self.sorted.len())
                    .filter(|&i| !self.done.get(i) && self.sorted[i].action == Action::Read(state))
                    .map(|i| self.order[i])
                    .collect()
            },
        }
    }
}

/// A fixed-size set of op indices.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Bits(Box<[u64]>);

impl Bits {
    fn new(len: usize) -> Self {
        Self(vec![0; len.div_ceil(64)].into_boxed_slice())
    }

    fn get(&self, i: usize) -> bool {
        self.0[i / 64] & (1 << (i % 64)) != 0
    }

    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }

    fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
}
