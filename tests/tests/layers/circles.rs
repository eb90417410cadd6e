//! Circles in a module graph: strongly connected components (Tarjan), and for each component a
//! set of circles through it that together use every one of its edges.

use super::modules::ModuleGraph;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Components of more than one module, each sorted, in the order of their first module.
pub fn tangles(graph: &ModuleGraph) -> Vec<Vec<String>> {
    let mut tarjan = Tarjan {
        graph,
        next: 0,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        components: Vec::new(),
    };
    for module in &graph.modules {
        if !tarjan.index.contains_key(module.as_str()) {
            tarjan.visit(module);
        }
    }
    let mut tangles: Vec<Vec<String>> = tarjan
        .components
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| {
            let mut c: Vec<String> = c.into_iter().map(str::to_string).collect();
            c.sort();
            c
        })
        .collect();
    tangles.sort();
    tangles
}

struct Tarjan<'g> {
    graph: &'g ModuleGraph,
    next: usize,
    index: BTreeMap<&'g str, usize>,
    low: BTreeMap<&'g str, usize>,
    stack: Vec<&'g str>,
    on_stack: BTreeSet<&'g str>,
    components: Vec<Vec<&'g str>>,
}

impl<'g> Tarjan<'g> {
    fn visit(&mut self, module: &'g str) {
        self.index.insert(module, self.next);
        self.low.insert(module, self.next);
        self.next += 1;
        self.stack.push(module);
        self.on_stack.insert(module);
        let graph = self.graph;
        for target in graph.targets(module) {
            if !self.index.contains_key(target) {
                self.visit(target);
                let low = self.low[module].min(self.low[target]);
                self.low.insert(module, low);
            } else if self.on_stack.contains(target) {
                let low = self.low[module].min(self.index[target]);
                self.low.insert(module, low);
            }
        }
        if self.low[module] == self.index[module] {
            let mut component = Vec::new();
            while let Some(top) = self.stack.pop() {
                self.on_stack.remove(top);
                component.push(top);
                if top == module {
                    break;
                }
            }
            self.components.push(component);
        }
    }
}

/// Circles inside `tangle`, each written `[a, b, …, a]`: for every edge not yet on a printed
/// circle, that edge followed by the shortest way back.
pub fn circles(graph: &ModuleGraph, tangle: &[String]) -> Vec<Vec<String>> {
    let inside: BTreeSet<&str> = tangle.iter().map(String::as_str).collect();
    let mut covered: BTreeSet<(String, String)> = BTreeSet::new();
    let mut circles = Vec::new();
    for (from, to) in graph.edges.keys() {
        let edge = (from.clone(), to.clone());
        if !inside.contains(from.as_str())
            || !inside.contains(to.as_str())
            || covered.contains(&edge)
        {
            continue;
        }
        let Some(back) = shortest_path(graph, &inside, to, from) else {
            continue;
        };
        let mut circle = vec![from.clone()];
        circle.extend(back);
        for pair in circle.windows(2) {
            covered.insert((pair[0].clone(), pair[1].clone()));
        }
        circles.push(circle);
    }
    circles
}

/// The modules on a shortest path from `start` to `goal` through `inside`, both ends included.
fn shortest_path(
    graph: &ModuleGraph,
    inside: &BTreeSet<&str>,
    start: &str,
    goal: &str,
) -> Option<Vec<String>> {
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(at) = queue.pop_front() {
        if at == goal {
            let mut path = vec![goal.to_string()];
            let mut step = goal;
            while step != start {
                step = came_from[step];
                path.push(step.to_string());
            }
            path.reverse();
            return Some(path);
        }
        for next in graph.targets(at) {
            if inside.contains(next) && next != start && !came_from.contains_key(next) {
                came_from.insert(next, at);
                queue.push_back(next);
            }
        }
    }
    None
}
