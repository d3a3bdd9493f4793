//! The step whose calls run at once: appends from several handles, reads,
//! `wait_durable` and `flush` joined in one future; their answers are
//! checked against the state before the step (appends first, then
//! barriers, then reads), so any interleaving the store chose passes and
//! none that breaks a promise does.

use objwal::{Entry, Error, RegionId};

use super::driver::{read_all, within, Driver};
use super::steps::Op;

impl Driver {
    /// Calls run at once; their answers are checked against the state
    /// before the step (appends first, then barriers, then reads).
    pub(super) async fn together(&mut self, ops: &[Op]) -> Result<(), String> {
        let (promised, admitted) = self.model.snapshot();
        let floor = self.model.floor();
        let mut appends = Vec::new();
        let mut calls = Vec::new();
        for op in ops {
            match op {
                Op::Append { handle, entries } => {
                    let (keys, batch) = self.register(entries);
                    appends.push((keys, *handle, batch));
                }
                other => calls.push(other.clone()),
            }
        }
        let append_futures = appends
            .iter()
            .map(|(_, handle, batch)| self.wal(*handle).append(batch.clone()));
        let mut resolved = Vec::new();
        for op in &calls {
            resolved.push(match op {
                Op::Read { region, from, .. } => (op.clone(), self.from(*region, *from)),
                Op::WaitDurable { region, pick } => {
                    (op.clone(), self.model.pick(*region, *pick).unwrap_or(0))
                }
                _ => (op.clone(), 0),
            });
        }
        let call_futures = resolved.iter().map(|(op, arg)| {
            let op = op.clone();
            let arg = *arg;
            let wal = self.wal(match &op {
                Op::Read { handle, .. } => *handle,
                _ => 0,
            });
            async move {
                match op {
                    Op::Read { region, .. } => {
                        Answer::Read(region, arg, read_all(wal, region, arg).await)
                    }
                    Op::WaitDurable { region, .. } if arg > 0 => {
                        Answer::Wait(arg, wal.wait_durable(region, arg).await)
                    }
                    Op::Flush => Answer::Flush(wal.flush().await),
                    _ => Answer::Nothing,
                }
            }
        });
        let (appended, answers) = within(
            "calls run together",
            futures::future::join(
                futures::future::join_all(append_futures),
                futures::future::join_all(call_futures),
            ),
        )
        .await?;
        for ((keys, _, _), result) in appends.iter().zip(appended) {
            self.append_answered(keys, result, false, &floor)?;
        }
        for answer in &answers {
            match answer {
                Answer::Wait(id, result) => self.wait_answered(*id, result.clone(), false)?,
                Answer::Flush(result) => self.flush_answered(result.clone(), false, &admitted)?,
                _ => {}
            }
        }
        for answer in answers {
            if let Answer::Read(region, from, result) = answer {
                self.read_answered(0, region, from, result, false, &promised)?;
            }
        }
        Ok(())
    }
}

/// What a call of a [`Driver::together`] step answered.
enum Answer {
    Read(RegionId, u64, Result<Vec<Entry>, Error>),
    Wait(u64, Result<(), Error>),
    Flush(Result<(), Error>),
    Nothing,
}
