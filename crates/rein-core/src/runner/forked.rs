//! A fork's run ([`crate::fork`]): the source's conversations taken over as
//! it is first taken up, and the steps that already ran in the source asked
//! about before they run again.

use rein_protocol::{RanInSource, Trigger};

use super::*;

/// Marks the checkpoint of a fork's question about a step that ran in the
/// source: it is asked once.
pub(crate) const FORK_QUESTION: &str = "fork_question";

impl TaskRun<'_> {
    /// Copies the parts of the source's journals the fork takes over, into
    /// the fork's journals that are still empty (a run stopped halfway
    /// copies the rest when the fork is taken up again). `Err(why)` if the
    /// source's are gone or unreadable: the fork cannot go on as it was made.
    pub(super) async fn copy_fork_journals(&self) -> std::result::Result<(), String> {
        let Some(from) = &self.rec.state.head.forked_from else {
            return Ok(());
        };
        let store = &self.ctx.store;
        let task = self.rec.state.id();
        for copy in &from.journals {
            let mine = store
                .load_journal(task, &copy.to)
                .await
                .map_err(|e| format!("cannot read the fork's journal `{}`: {e}", copy.to))?;
            if !mine.is_empty() {
                continue;
            }
            let theirs = store
                .load_journal(&from.task_id, &copy.from)
                .await
                .map_err(|e| {
                    format!(
                        "cannot read journal `{}` of task {}: {e}",
                        copy.from, from.task_id
                    )
                })?;
            let take = usize::try_from(copy.entries).unwrap_or(usize::MAX);
            if theirs.len() < take {
                return Err(format!(
                    "journal `{}` of task {} has {} entries, fewer than the {take} the fork takes over (was the task deleted?)",
                    copy.from,
                    from.task_id,
                    theirs.len()
                ));
            }
            // The fork did not spend what the source's model calls used.
            let entries: Vec<serde_json::Value> = theirs[..take]
                .iter()
                .map(|e| {
                    let mut e = e.clone();
                    if let Some(o) = e.as_object_mut() {
                        o.remove("usage");
                    }
                    e
                })
                .collect();
            store
                .append_journal(task, &copy.to, 0, &entries)
                .await
                .map_err(|e| format!("cannot write the fork's journal `{}`: {e}", copy.to))?;
        }
        Ok(())
    }

    /// What step `i` did in the fork's source after the fork point, if it
    /// is to be asked about and has not been yet.
    pub(super) fn ran_in_source(&self, i: usize) -> Option<RanInSource> {
        let from = self.rec.state.head.forked_from.as_ref()?;
        let id = &self.steps[i].id;
        let ran = from.ran_in_source.iter().find(|r| &r.step_id == id)?;
        let asked = self.rec.state.checkpoints.iter().any(|cp| {
            cp.step_id.as_deref() == Some(id.as_str()) && cp.metadata.contains_key(FORK_QUESTION)
        });
        (!asked).then(|| ran.clone())
    }

    /// Asks a person whether step `i`, which already ran in the source, runs
    /// again in the fork: `rerun`, `skip` or `abort`, as for a step rein
    /// stopped in the middle of.
    pub(super) fn ask_ran_in_source(&mut self, i: usize, ran: RanInSource) -> Result<()> {
        let from = self
            .rec
            .state
            .head
            .forked_from
            .as_ref()
            .map(|f| f.task_id.to_string())
            .unwrap_or_default();
        let span = SpanRef::child_of(&self.rec.state.head.span_id);
        let mark = serde_json::to_value(&ran).unwrap_or_default();
        let checkpoint_id = self.open_question(i, (FORK_QUESTION, mark), &span)?;
        let id = &self.steps[i].id;
        let request = self.rerun_question(
            i,
            &checkpoint_id,
            Trigger::TaskBlocked,
            format!("Step `{id}` already ran in task {from}: run it again, skip it, or abort it?"),
            format!(
                "`{id}` already ran in task {from}, which this task was forked from: it completed there at {} (event {}) and {}. \
                 Running it again here may repeat what it did. \
                 rerun: run it again; skip: go on without it; abort: fail the step (its dependants do not run).",
                ran.at.format("%Y-%m-%d %H:%M:%S UTC"),
                ran.seq,
                ran.did
            ),
        );
        self.await_request(i, checkpoint_id, span, request)
    }
}
