//! Client-side shared memory (`--shared-memory system|cuda`), laid out as perf_analyzer does it:
//! one region per output, named after the output and shared by every request, and one region
//! per input and data step named `<input>_<stream>_<step>`; the POSIX key is `/<region>`.
//!
//! Every region this process creates is recorded in a process-wide list, so that a Ctrl-C or an
//! error path can unlink them all ([`unlink_all_live`]) even when the owning [`ShmSet`] never
//! gets to run [`ShmSet::release`]. Dropping a region unlinks it as well.

use std::collections::BTreeSet;
use std::str::FromStr;

use parking_lot::Mutex;
use shared_memory::{Shmem, ShmemConf, ShmemError};

use super::{ClientError, ClientResult, InferClient, InferResult, InputSource, OutputTarget, RequestSpec};
use crate::proto::inference::{ModelConfig, ModelMetadataResponse};
use crate::tensor::{byte_size, element_count, DataType, Tensor};

/// perf_analyzer's `--output-shared-memory-size` default, for outputs of unknown size.
pub const DEFAULT_OUTPUT_SHM_BYTES: u64 = 100 * 1024;

/// `--shared-memory`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SharedMemoryKind {
    None,
    System,
    Cuda,
}

impl FromStr for SharedMemoryKind {
    type Err = ClientError;
    fn from_str(s: &str) -> ClientResult<Self> {
        match s {
            "none" => Ok(SharedMemoryKind::None),
            "system" => Ok(SharedMemoryKind::System),
            "cuda" => Ok(SharedMemoryKind::Cuda),
            other => Err(ClientError::Invalid(format!("bad --shared-memory '{other}': expected none, system or cuda"))),
        }
    }
}

impl SharedMemoryKind {
    /// Whether this kind can run here. CUDA shared memory is not implemented yet (issue 6): on a
    /// machine without a CUDA device that is reported as such, and otherwise as not supported.
    pub fn check_available(self) -> ClientResult<()> {
        if self != SharedMemoryKind::Cuda {
            return Ok(());
        }
        if cuda_device_count() == 0 {
            Err(ClientError::Invalid("--shared-memory cuda needs a GPU: no CUDA device found".into()))
        } else {
            Err(ClientError::Invalid(
                "not supported: --shared-memory cuda (CUDA shared memory is not implemented yet)".into(),
            ))
        }
    }
}

/// Number of CUDA devices; 0 when the driver library is absent or reports none.
fn cuda_device_count() -> i32 {
    // SAFETY: only probes whether the driver library can be loaded; nothing is called from it.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return 0;
    }
    if cudarc::driver::result::init().is_err() {
        return 0;
    }
    cudarc::driver::result::device::get_count().unwrap_or(0)
}

/// `<pid>_<8 random hex digits>`: what makes one setup's region names its own.
pub fn unique_tag() -> String {
    format!("{}_{:08x}", std::process::id(), rand::random::<u32>())
}

/// Keys of the regions this process created and has not unlinked yet.
static LIVE_KEYS: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Unlinks every region this process still owns; for Ctrl-C and fatal-error paths. The mappings
/// stay valid until the process exits. Returns how many keys were unlinked.
pub fn unlink_all_live() -> usize {
    let keys = std::mem::take(&mut *LIVE_KEYS.lock());
    let mut unlinked = 0;
    for key in keys {
        let Ok(c_key) = std::ffi::CString::new(key) else {
            continue;
        };
        // SAFETY: shm_unlink only reads the NUL-terminated name.
        if unsafe { libc::shm_unlink(c_key.as_ptr()) } == 0 {
            unlinked += 1;
        }
    }
    unlinked
}

/// One POSIX shared-memory object created by this process, mapped for reading and writing.
pub struct ShmRegion {
    pub name: String,
    pub key: String,
    pub byte_size: u64,
    mapping: Shmem,
}

// SAFETY: the mapping is plain memory; reads and writes copy through bounds-checked raw
// pointers, and concurrent use of one region's contents is the caller's business, as with Triton.
unsafe impl Send for ShmRegion {}
unsafe impl Sync for ShmRegion {}

impl ShmRegion {
    /// Creates the object `key` (`/name`) of `byte_size` bytes.
    pub fn create(name: &str, byte_size: u64) -> ClientResult<Self> {
        let key = format!("/{}", name.replace('/', "_"));
        // POSIX objects cannot be empty; a zero-byte tensor still gets a 1-byte object.
        let mapping = ShmemConf::new().os_id(&key).size(byte_size.max(1) as usize).create().map_err(|e| match e {
            ShmemError::MappingIdExists => ClientError::Invalid(format!(
                "shared memory key '{key}' already exists (another run uses it, or a stale one: remove /dev/shm{key})"
            )),
            e => ClientError::Invalid(format!("cannot create shared memory '{key}' of {byte_size} bytes: {e}")),
        })?;
        LIVE_KEYS.lock().insert(key.clone());
        Ok(ShmRegion { name: name.to_string(), key, byte_size, mapping })
    }

    fn check(&self, offset: u64, len: usize) -> ClientResult<()> {
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.byte_size => Ok(()),
            _ => Err(ClientError::Invalid(format!(
                "shared memory region '{}': {len} bytes at offset {offset} exceed its {} bytes",
                self.name, self.byte_size
            ))),
        }
    }

    pub fn write(&self, offset: u64, data: &[u8]) -> ClientResult<()> {
        self.check(offset, data.len())?;
        // SAFETY: `check` proved offset..offset+len lies inside the mapping.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.mapping.as_ptr().add(offset as usize), data.len()) };
        Ok(())
    }

    pub fn read(&self, offset: u64, len: usize) -> ClientResult<Vec<u8>> {
        self.check(offset, len)?;
        let mut out = vec![0u8; len];
        // SAFETY: as in `write`.
        unsafe { std::ptr::copy_nonoverlapping(self.mapping.as_ptr().add(offset as usize), out.as_mut_ptr(), len) };
        Ok(out)
    }
}

impl Drop for ShmRegion {
    fn drop(&mut self) {
        // `Shmem`'s own drop unmaps and, as the owner, unlinks the key.
        LIVE_KEYS.lock().remove(&self.key);
    }
}

/// Per-output region sizes: batch × per-item bytes when the output's shape and dtype are fixed.
/// A variable-size output gets `variable_bytes` (`--output-shared-memory-size`), or more when
/// `probe` (one answered request of the same run) shows it needs more.
pub fn output_byte_sizes(
    meta: &ModelMetadataResponse,
    config: &ModelConfig,
    batch_size: u64,
    variable_bytes: u64,
    probe: Option<&InferResult>,
) -> Vec<(String, u64)> {
    meta.outputs
        .iter()
        .map(|o| {
            let dims: &[i64] = if config.max_batch_size > 0 { o.shape.get(1..).unwrap_or(&[]) } else { &o.shape };
            let per_item = DataType::parse(&o.datatype).and_then(|d| byte_size(d, dims));
            let observed = probe
                .and_then(|r| r.outputs.iter().find(|(name, _)| *name == o.name))
                .map_or(0, |(_, tensor)| tensor.data.len() as u64);
            let size = match per_item {
                Some(n) if config.max_batch_size > 0 => n as u64 * batch_size,
                Some(n) => n as u64,
                // perf_analyzer reserves `--output-shared-memory-size` per batch item.
                None => variable_bytes.saturating_mul(batch_size.max(1)).max(observed),
            };
            (o.name.clone(), size)
        })
        .collect()
}

/// Whether some output's size is only known once the server answers.
pub fn has_variable_outputs(meta: &ModelMetadataResponse, config: &ModelConfig) -> bool {
    output_byte_sizes(meta, config, 1, 0, None).iter().any(|(_, size)| *size == 0)
}

/// One region as the server knows it: enough to register it again after the server restarted
/// (a restart forgets every registration; the client's regions and their data stay).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShmRegistration {
    pub name: String,
    pub key: String,
    pub byte_size: u64,
}

impl ShmRegistration {
    /// Registers every region in `all` again: each is unregistered first (a server that did not
    /// restart still has it), then registered.
    pub async fn register_all<C: InferClient>(client: &C, all: &[ShmRegistration]) -> ClientResult<()> {
        for r in all {
            let _ = client.unregister_system_shm(&r.name).await;
            client.register_system_shm(&r.name, &r.key, 0, r.byte_size).await?;
        }
        Ok(())
    }
}

/// The regions of one run, registered with the server.
pub struct ShmSet {
    regions: Vec<ShmRegion>,
    registered: Vec<String>,
    /// [`unique_tag`], fixed at setup: every region name is `<prefix><tag>_...`.
    tag: String,
}

impl ShmSet {
    /// perf_analyzer's setup: unregister everything on the server (system and CUDA), create and
    /// register one region per output (`<prefix><tag>_` + output name) and one per input and
    /// step (`<prefix><tag>_<input>_0_<step>`) holding that step's data, and return `specs`
    /// rewritten to use them. `tag` is this process's id and a random part ([`unique_tag`]), so
    /// two clients never collide on a key in /dev/shm nor on a region name in one server, even
    /// from different hosts or containers where pids repeat; perf_analyzer's names have neither.
    /// On error, whatever was created is unregistered and unlinked before returning.
    pub async fn setup<C: InferClient>(
        client: &C,
        specs: &[RequestSpec],
        output_sizes: &[(String, u64)],
        prefix: &str,
    ) -> ClientResult<(ShmSet, Vec<RequestSpec>)> {
        client.unregister_system_shm("").await?;
        client.unregister_cuda_shm("").await?;
        let mut set = ShmSet { regions: vec![], registered: vec![], tag: unique_tag() };
        match set.update(client, specs, output_sizes, prefix).await {
            Ok(specs) => Ok((set, specs)),
            Err(e) => {
                let _ = set.release(client).await;
                Err(e)
            }
        }
    }

    /// Rewrites `specs` to use this set's regions, as [`ShmSet::setup`] does, reusing every
    /// region that is already big enough (its data rewritten in place) and re-registering only
    /// those that must grow. A sweep calls it once per batch size.
    pub async fn update<C: InferClient>(
        &mut self,
        client: &C,
        specs: &[RequestSpec],
        output_sizes: &[(String, u64)],
        prefix: &str,
    ) -> ClientResult<Vec<RequestSpec>> {
        let prefix = format!("{prefix}{}_", self.tag);
        for (output, size) in output_sizes {
            self.ensure(client, &format!("{prefix}{output}"), *size, None).await?;
        }
        let mut out = Vec::with_capacity(specs.len());
        for (step, spec) in specs.iter().enumerate() {
            let mut spec = spec.clone();
            for (name, source) in &mut spec.inputs {
                let InputSource::Inline(tensor) = source else {
                    continue;
                };
                let region = format!("{prefix}{name}_0_{step}");
                self.ensure(client, &region, tensor.data.len() as u64, Some(&tensor.data)).await?;
                *source = InputSource::SystemShm {
                    region,
                    offset: 0,
                    byte_size: tensor.data.len() as u64,
                    dtype: tensor.dtype,
                    shape: tensor.shape.clone(),
                };
            }
            for (name, target) in &mut spec.outputs {
                let Some((_, size)) = output_sizes.iter().find(|(o, _)| *o == *name) else {
                    return Err(ClientError::Invalid(format!("no shared memory size for output '{name}'")));
                };
                *target = OutputTarget::SystemShm { region: format!("{prefix}{name}"), offset: 0, byte_size: *size };
            }
            out.push(spec);
        }
        Ok(out)
    }

    /// A registered region `name` of at least `size` bytes holding `data` at offset 0.
    async fn ensure<C: InferClient>(
        &mut self,
        client: &C,
        name: &str,
        size: u64,
        data: Option<&[u8]>,
    ) -> ClientResult<()> {
        if let Some(i) = self.regions.iter().position(|r| r.name == name) {
            if self.regions[i].byte_size >= size {
                if let Some(data) = data {
                    self.regions[i].write(0, data)?;
                }
                return Ok(());
            }
            // Too small for this point: replace it (dropping the old one unlinks it).
            client.unregister_system_shm(name).await?;
            self.registered.retain(|n| n != name);
            self.regions.remove(i);
        }
        self.add(client, ShmRegion::create(name, size)?, data).await
    }

    async fn add<C: InferClient>(&mut self, client: &C, region: ShmRegion, data: Option<&[u8]>) -> ClientResult<()> {
        if let Some(data) = data {
            region.write(0, data)?;
        }
        let (name, key, size) = (region.name.clone(), region.key.clone(), region.byte_size);
        self.regions.push(region);
        client.register_system_shm(&name, &key, 0, size).await?;
        self.registered.push(name);
        Ok(())
    }

    /// The regions registered now, as [`ShmRegistration::register_all`] takes them.
    pub fn registrations(&self) -> Vec<ShmRegistration> {
        self.regions
            .iter()
            .filter(|r| self.registered.contains(&r.name))
            .map(|r| ShmRegistration { name: r.name.clone(), key: r.key.clone(), byte_size: r.byte_size })
            .collect()
    }

    pub fn region(&self, name: &str) -> Option<&ShmRegion> {
        self.regions.iter().find(|r| r.name == name)
    }

    /// Copies shm outputs of `result` (which carry dtype and shape only) out of their regions.
    pub fn read_outputs(&self, spec: &RequestSpec, result: &mut InferResult) -> ClientResult<()> {
        for (name, tensor) in &mut result.outputs {
            let Some((_, OutputTarget::SystemShm { region, offset, byte_size })) =
                spec.outputs.iter().find(|(o, _)| *o == *name)
            else {
                continue;
            };
            let shm = self
                .region(region)
                .ok_or_else(|| ClientError::Invalid(format!("no shared memory region '{region}'")))?;
            let len = match byte_size_of(tensor) {
                Some(n) => n,
                None => bytes_tensor_len(shm, *offset, *byte_size, tensor)?,
            };
            if len as u64 > *byte_size {
                return Err(ClientError::Protocol(format!(
                    "output '{name}' needs {len} bytes, more than its {byte_size}-byte region"
                )));
            }
            tensor.data = shm.read(*offset, len)?.into();
        }
        Ok(())
    }

    /// Unregisters every region from the server, then unlinks them all. Unlinking happens even
    /// when unregistering fails (the server may be gone); the first error is returned.
    pub async fn release<C: InferClient>(mut self, client: &C) -> ClientResult<()> {
        let mut first_err = None;
        for name in std::mem::take(&mut self.registered) {
            if let Err(e) = client.unregister_system_shm(&name).await {
                first_err.get_or_insert(e);
                if first_err.as_ref().is_some_and(ClientError::is_fatal) {
                    break;
                }
            }
        }
        drop(self);
        first_err.map_or(Ok(()), Err)
    }
}

fn byte_size_of(tensor: &Tensor) -> Option<usize> {
    byte_size(tensor.dtype, &tensor.shape)
}

/// Length of a BYTES tensor stored at `offset`: walks the length prefixes.
fn bytes_tensor_len(shm: &ShmRegion, offset: u64, limit: u64, tensor: &Tensor) -> ClientResult<usize> {
    let count = element_count(&tensor.shape)
        .ok_or_else(|| ClientError::Protocol(format!("bad output shape {:?}", tensor.shape)))?;
    let mut pos = 0u64;
    for _ in 0..count {
        if pos + 4 > limit {
            return Err(ClientError::Protocol("BYTES output overruns its shared memory region".into()));
        }
        let len = u32::from_le_bytes(shm.read(offset + pos, 4)?.try_into().expect("4 bytes")) as u64;
        pos += 4 + len;
    }
    Ok(pos as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::inference::model_metadata_response::TensorMetadata;

    /// One test for everything touching the process-wide key list, so that tests running in
    /// parallel do not unlink each other's regions.
    #[test]
    fn region_round_trip_bounds_and_unlink() {
        let name = format!("pb_client_unit_{}", std::process::id());
        let region = ShmRegion::create(&name, 16).unwrap();
        region.write(4, &[1, 2, 3]).unwrap();
        assert_eq!(region.read(4, 3).unwrap(), vec![1, 2, 3]);
        assert!(region.write(14, &[0; 3]).is_err());
        assert!(region.read(u64::MAX, 2).is_err());
        let again = ShmRegion::create(&name, 16).err().unwrap().to_string();
        assert!(again.contains("already exists"), "{again}");
        let key = region.key.clone();
        assert!(LIVE_KEYS.lock().contains(&key));
        drop(region);
        assert!(!LIVE_KEYS.lock().contains(&key));
        assert!(ShmemConf::new().os_id(&key).open().is_err(), "dropped region is unlinked");

        // The Ctrl-C path: unlinked while still owned.
        let region = ShmRegion::create(&name, 8).unwrap();
        assert!(unlink_all_live() >= 1);
        assert!(ShmemConf::new().os_id(&region.key).open().is_err());
    }

    #[test]
    fn tags_carry_the_pid_and_differ() {
        let (a, b) = (unique_tag(), unique_tag());
        assert!(a.starts_with(&format!("{}_", std::process::id())), "{a}");
        assert_ne!(a, b);
    }

    #[test]
    fn kinds_parse_and_cuda_is_explained() {
        assert_eq!("system".parse::<SharedMemoryKind>().unwrap(), SharedMemoryKind::System);
        assert!("gpu".parse::<SharedMemoryKind>().is_err());
        assert!(SharedMemoryKind::System.check_available().is_ok());
        let e = SharedMemoryKind::Cuda.check_available().unwrap_err().to_string();
        assert!(e.contains("cuda"), "{e}");
    }

    #[test]
    fn output_sizes_fixed_and_variable() {
        let t = |n: &str, shape: Vec<i64>| TensorMetadata { name: n.into(), datatype: "FP32".into(), shape };
        let meta =
            ModelMetadataResponse { outputs: vec![t("A", vec![-1, 16]), t("B", vec![-1, -1])], ..Default::default() };
        let config = ModelConfig { max_batch_size: 8, ..Default::default() };
        assert_eq!(
            output_byte_sizes(&meta, &config, 4, 999, None),
            vec![("A".to_string(), 256), ("B".to_string(), 4 * 999)],
            "--output-shared-memory-size is per batch item, as perf_analyzer reserves it"
        );
        assert!(has_variable_outputs(&meta, &config));
        // A probe answer larger than --output-shared-memory-size wins; a smaller one does not.
        let answer = |bytes: usize| InferResult {
            outputs: vec![(
                "B".into(),
                Tensor { dtype: DataType::Fp32, shape: vec![4, 1], data: vec![0; bytes].into() },
            )],
            ..Default::default()
        };
        assert_eq!(output_byte_sizes(&meta, &config, 4, 999, Some(&answer(8192)))[1].1, 8192);
        assert_eq!(output_byte_sizes(&meta, &config, 4, 999, Some(&answer(16)))[1].1, 4 * 999);
        let fixed = ModelMetadataResponse { outputs: vec![t("A", vec![-1, 16])], ..Default::default() };
        assert!(!has_variable_outputs(&fixed, &config));
    }
}
