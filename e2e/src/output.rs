//! Capturing a child process's output: every line is kept (for failure reports and secret scans) and the
//! first line matching a predicate is handed over as the readiness signal.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::oneshot;

/// The lines a process has printed so far (stdout and stderr interleaved in arrival order).
#[derive(Debug, Clone, Default)]
pub struct OutputLog {
    lines: Arc<Mutex<Vec<String>>>,
}

impl OutputLog {
    /// A copy of every line so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Every line so far, joined with newlines.
    pub fn text(&self) -> String {
        self.lines().join("\n")
    }

    /// The last `n` lines, for error reports.
    pub fn tail(&self, n: usize) -> String {
        let lines = self.lines();
        let start = lines.len().saturating_sub(n);
        lines[start..].join("\n")
    }

    fn push(&self, line: String) {
        self.lines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(line);
    }

    /// Reads `stream` line by line into the log until EOF; the first line for which `ready` returns `Some` is
    /// sent on the returned channel (which closes without a value at EOF if no line matched).
    pub(crate) fn capture<R, T, F>(&self, stream: R, ready: F) -> oneshot::Receiver<T>
    where
        R: AsyncRead + Unpin + Send + 'static,
        T: Send + 'static,
        F: Fn(&str) -> Option<T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let log = self.clone();
        tokio::spawn(async move {
            let mut tx = Some(tx);
            let mut lines = BufReader::new(stream).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if tx.is_some()
                    && let Some(v) = ready(&line)
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(v);
                }
                log.push(line);
            }
        });
        rx
    }
}
