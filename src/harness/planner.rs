//! The planner: the one owner of every run an assessment makes. The main pass, blame's
//! passes, localization's traced re-runs, a program's capture re-runs, its world-size run and
//! the order pass all ask the [`Planner`] for runs; it tells progress of each before it is
//! made ([`RunStart`], which the suite turns into `Event::Run`, with its reason), makes it
//! through the executor ([`super::executor`]) and counts it in the report ([`PassCount`]), so
//! a progress display and the JSON account for the same runs.

use super::executor::{self, Pass, PassRuns};
use super::source::{Collected, RunSource, RunStart, Runs};
use super::Options;
use crate::controls::Controls;
use crate::outcome::case::PassCount;
use crate::outcome::Failure;
use crate::vary::{RunSettings, Variation};

/// Makes every run of one subject's assessment, under one set of controls and options.
pub struct Planner<'a> {
    /// The controls every run starts from.
    pub controls: &'a Controls,
    /// The harness options (runs, variations, tracing, localization).
    pub opts: &'a Options,
    progress: &'a mut dyn FnMut(RunStart),
    made: Vec<PassCount>,
}

impl<'a> Planner<'a> {
    /// A planner that tells `progress` of every run before it is made.
    pub fn new(
        controls: &'a Controls,
        opts: &'a Options,
        progress: &'a mut dyn FnMut(RunStart),
    ) -> Planner<'a> {
        Planner {
            controls,
            opts,
            progress,
            made: Vec::new(),
        }
    }

    /// Counts `runs` runs made for `purpose` (runs of one purpose in a row are one entry).
    fn count(&mut self, purpose: &str, runs: usize) {
        match self.made.last_mut() {
            Some(p) if p.purpose == purpose => p.runs += runs,
            _ => self.made.push(PassCount {
                purpose: purpose.to_string(),
                runs,
            }),
        }
    }

    /// A pass of `runs` of `source` with `vary` applied (see [`executor`]).
    pub fn pass(
        &mut self,
        source: &dyn RunSource,
        vary: &[Variation],
        runs: PassRuns,
        purpose: &str,
    ) -> Pass {
        let p = executor::pass(source, self.controls, vary, runs, purpose, self.progress);
        // One run made (and told) per meta, failed ones included.
        self.count(purpose, p.metas.len());
        p
    }

    /// Hands back what was made (for the report).
    pub fn into_made(self) -> Vec<PassCount> {
        self.made
    }
}

impl Runs for Planner<'_> {
    fn opts(&self) -> &Options {
        self.opts
    }

    fn settings(&self, index: usize, trace: bool) -> RunSettings {
        RunSettings::for_run(self.controls, &self.opts.vary, index, trace)
    }

    fn one(
        &mut self,
        source: &dyn RunSource,
        settings: &RunSettings,
        index: usize,
        told: RunStart,
    ) -> Result<Collected, Failure> {
        (self.progress)(told);
        self.count(told.purpose, 1);
        source
            .start(index, settings)
            .outputs
            .and_then(|collect| collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_one_purpose_in_a_row_are_one_entry() {
        let (controls, opts) = (Controls::default(), Options::runs(2));
        let mut told = Vec::new();
        let mut progress = |r: RunStart| told.push(format!("{} {}/{}", r.purpose, r.index, r.of));
        let mut p = Planner::new(&controls, &opts, &mut progress);
        for purpose in ["main", "main", "capture: runs 0 and 1", "main"] {
            p.count(purpose, 1);
        }
        assert_eq!(
            p.into_made()
                .iter()
                .map(|c| (c.purpose.as_str(), c.runs))
                .collect::<Vec<_>>(),
            [("main", 2), ("capture: runs 0 and 1", 1), ("main", 1)]
        );
    }
}
