//! How problems are gathered: each step of validation returns what it made of its settings with
//! the problems it found, and every problem of every step is reported together.

use std::fmt;

#[derive(Debug)]
pub struct ConfigErrors(pub Vec<String>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} configuration problem(s):", self.0.len())?;
        for p in &self.0 {
            writeln!(f, "  - {p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// What one step of validation made of its settings, and the problems it found in them. The
/// value stands in even when there are problems, so the steps after it still check theirs.
#[derive(Debug)]
pub(super) struct Checked<T> {
    pub value: T,
    pub problems: Vec<String>,
}

impl<T> Checked<T> {
    /// `value`, found without a problem.
    pub fn ok(value: T) -> Self {
        Checked::with(value, Vec::new())
    }

    /// `value`, with the problems found on the way to it.
    pub fn with(value: T, problems: Vec<String>) -> Self {
        Checked { value, problems }
    }
}

/// The problems of the steps so far, in the order the steps ran.
#[derive(Debug, Default)]
pub(super) struct Problems(Vec<String>);

impl Problems {
    /// The step's value; its problems join the others.
    pub fn keep<T>(&mut self, step: Checked<T>) -> T {
        self.0.extend(step.problems);
        step.value
    }

    /// `value` when no step found a problem, else every problem found.
    pub fn or_value<T>(self, value: T) -> Result<T, ConfigErrors> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(ConfigErrors(self.0))
        }
    }
}
