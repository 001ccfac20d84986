//! What the in-process stack logs, captured for tests that check it.

use std::io;
use std::sync::{Arc, Mutex};

use tracing::subscriber::DefaultGuard;
use tracing_subscriber::fmt::MakeWriter;

/// Every log line of this thread's tasks at debug level, as written before
/// the production writer's redaction, from `start` until dropped. The
/// stack of a `#[tokio::test]` runs on the test's thread, so this is all
/// it logs. Secrets must not reach a log line at all: the redaction is a
/// second line of defence, not the first.
pub struct CapturedLogs {
    lines: Buffer,
    _guard: DefaultGuard,
}

impl CapturedLogs {
    pub fn start() -> Self {
        let lines = Buffer::default();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter("debug")
            .with_writer(lines.clone())
            .with_ansi(false)
            .finish();
        Self {
            lines,
            _guard: tracing::subscriber::set_default(subscriber),
        }
    }

    /// Everything logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.lines.0.lock().unwrap()).into_owned()
    }

    /// Panics, naming the secret but not showing it, when any of `secrets`
    /// (name, value) was logged. Also fails when nothing was logged, since
    /// then nothing was checked.
    pub fn assert_free_of(&self, secrets: &[(&str, &str)]) {
        let text = self.text();
        assert!(!text.is_empty(), "nothing was logged");
        for (name, value) in secrets {
            assert!(!value.is_empty(), "the secret {name} is empty");
            assert!(!text.contains(value), "the logs hold the {name}");
        }
    }
}

impl std::fmt::Debug for CapturedLogs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapturedLogs").finish_non_exhaustive()
    }
}

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl io::Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Buffer {
    type Writer = Buffer;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}
