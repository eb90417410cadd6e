//! When the batcher waits before cutting a batch: the writers its last batch answered usually
//! come straight back, and a batch cut before they do leaves them the next log entry to
//! themselves.
//!
//! With one batch in flight, concurrent writers split into two groups that take turns: the
//! proposals that queued while a batch was written go at once in the next, while the writers
//! that batch answers are still on their way back. Each group then pays a log entry (an append
//! and its sync on every node, two AppendEntries per follower, an apply, a commit) for half the
//! writes it could carry. So when the last batch answered writers that may return, the next
//! waits for them, briefly and only up to [`GATHERED`] proposals. Waiting is pure policy here;
//! the batcher does the waiting.

use std::time::Duration;

/// How long a batch waits for the writers the last batch answered. tokio's timer fires on whole
/// milliseconds, so a wait that does not see them all lasts up to a millisecond; one that does
/// ends as the last arrives.
pub const GATHER: Duration = Duration::from_micros(100);

/// A batch holding this many proposals goes without waiting for more. A log entry costs about
/// as much CPU across the three nodes as twenty writes in it (README, "The replicated
/// registry"): past this size its share is small, and waiting would only add latency.
pub const GATHERED: usize = 16;

/// The longest run of batches cut at once after waits that did not see their writers return.
const MAX_SKIP: u32 = 64;

/// The batcher's memory of how its writers come back.
#[derive(Debug, Default)]
pub struct Gather {
    /// Proposals the last batch answered plus those queued behind it: the writers in play.
    expected: usize,
    /// Batches still to cut at once after a wait that timed out.
    skip: u32,
    /// The run [`Gather::skip`] was last set to; doubles with each wait that times out.
    missed: u32,
}

impl Gather {
    /// How many proposals the next batch should hold before it goes (it may go sooner, after
    /// [`GATHER`]); 0 or 1 means at once. Asked once per batch: a batch skipped counts here.
    pub fn wanted(&mut self) -> usize {
        if self.skip > 0 {
            self.skip -= 1;
            return 0;
        }
        self.expected.min(GATHERED)
    }

    /// A batch waited for [`Gather::wanted`] proposals: `reached` if they all came. Writers
    /// that do not come back (each write from a different caller) make the waits time out, and
    /// each timeout doubles the run of batches that then go at once, so such traffic pays for
    /// one wait in up to 64 batches (`MAX_SKIP`).
    pub fn waited(&mut self, reached: bool) {
        if reached {
            self.missed = 0;
        } else {
            self.missed = (self.missed * 2).clamp(1, MAX_SKIP);
            self.skip = self.missed;
        }
    }

    /// A batch of `batch` proposals was answered with `queued` more waiting behind it. A batch
    /// of one is no sign of writers taking turns (one writer, or writes one after another from
    /// different callers, such as a call's steps through the approval flow): the next goes at
    /// once.
    pub fn answered(&mut self, batch: usize, queued: usize) {
        self.expected = if batch > 1 { batch + queued } else { 0 };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_writer_never_waits() {
        let mut gather = Gather::default();
        assert!(gather.wanted() <= 1, "nothing answered yet");
        for _ in 0..10 {
            gather.answered(1, 0);
            assert!(gather.wanted() <= 1);
        }
    }

    #[test]
    fn a_write_queued_behind_a_lone_one_goes_at_once() {
        let mut gather = Gather::default();
        gather.answered(1, 1);
        assert!(gather.wanted() <= 1);
    }

    #[test]
    fn writers_split_in_two_groups_are_waited_for_together() {
        let mut gather = Gather::default();
        // Eight answered while eight more queued: all sixteen are in play.
        gather.answered(8, 8);
        assert_eq!(gather.wanted(), 16);
        gather.waited(true);
        gather.answered(16, 0);
        assert_eq!(gather.wanted(), 16, "they keep coming back together");
    }

    #[test]
    fn a_batch_that_is_large_already_does_not_wait_for_more() {
        let mut gather = Gather::default();
        gather.answered(32, 32);
        assert_eq!(gather.wanted(), GATHERED);
    }

    #[test]
    fn waits_that_time_out_are_skipped_for_runs_that_double_up_to_a_bound() {
        let mut gather = Gather::default();
        let mut runs = Vec::new();
        for _ in 0..9 {
            gather.answered(3, 2);
            assert_eq!(gather.wanted(), 5, "a wait after each run");
            gather.waited(false);
            let mut run = 0;
            while gather.wanted() == 0 {
                run += 1;
            }
            runs.push(run);
        }
        assert_eq!(runs, [1, 2, 4, 8, 16, 32, 64, 64, 64]);
    }

    #[test]
    fn a_wait_that_sees_its_writers_ends_the_skipping() {
        let mut gather = Gather::default();
        for _ in 0..4 {
            gather.answered(3, 2);
            gather.wanted();
            gather.waited(false);
        }
        while gather.wanted() == 0 {}
        gather.waited(true);
        gather.answered(3, 2);
        gather.waited(false);
        let mut run = 0;
        while gather.wanted() == 0 {
            run += 1;
        }
        assert_eq!(run, 1, "a timeout after a success skips one batch again");
    }
}
