//! Under `mpirun`: the MPI library, loaded when the run starts (no build dependency, as
//! perf_analyzer does), for a barrier before each load point so the ranks start it together,
//! and one at the end so rank 0 merges the finished shard folders by itself.

use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;

use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};

use super::point::WindowProgress;
use super::sweep::SweepObserver;
use crate::load::LoadMode;
use crate::results::{LoadPoint, PointResult};

/// Open MPI's and MPICH's library names, newest ABI first.
const LIBRARIES: &[&str] = &["libmpi.so.40", "libmpi.so.12", "libmpi.so"];
/// `MPI_THREAD_SERIALIZED` (the same in Open MPI and MPICH): calls come from one thread at a
/// time, not always the one that initialised MPI.
const THREAD_SERIALIZED: c_int = 2;
/// MPICH's `MPI_COMM_WORLD` handle (Open MPI's is the address of `ompi_mpi_comm_world`).
const MPICH_COMM_WORLD: c_int = 0x4400_0000;

/// `MPI_COMM_WORLD` in the loaded library's ABI.
#[derive(Clone, Copy)]
enum World {
    OpenMpi(*mut c_void),
    Mpich,
}

/// An initialised MPI library.
pub struct Mpi {
    lib: Library,
    world: World,
}

// SAFETY: MPI is initialised THREAD_SERIALIZED and every call goes through `&self` methods that
// the run makes one at a time (before a point, at the end); the world handle is a constant.
unsafe impl Send for Mpi {}
unsafe impl Sync for Mpi {}

static WORLD: OnceLock<Mpi> = OnceLock::new();

/// Whether an MPI launcher started this process.
pub fn launched() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"].iter().any(|v| std::env::var_os(v).is_some())
}

/// Opens and initialises MPI once for the process.
pub fn join() -> Result<&'static Mpi, String> {
    if let Some(mpi) = WORLD.get() {
        return Ok(mpi);
    }
    let mpi = Mpi::open()?;
    Ok(WORLD.get_or_init(|| mpi))
}

/// MPI, when [`join`] opened it.
pub fn world() -> Option<&'static Mpi> {
    WORLD.get()
}

impl Mpi {
    fn open() -> Result<Mpi, String> {
        // RTLD_GLOBAL: Open MPI's plugins resolve their symbols against libmpi.
        let lib = LIBRARIES
            .iter()
            .find_map(|name| unsafe { Library::open(Some(*name), RTLD_NOW | RTLD_GLOBAL) }.ok())
            .ok_or_else(|| {
                format!("MPI: none of {} could be loaded (install Open MPI or MPICH)", LIBRARIES.join(", "))
            })?;
        // SAFETY: the signatures are MPI's (MPI-3 standard); the symbols come from libmpi.
        unsafe {
            let init = lib
                .get::<unsafe extern "C" fn(*mut c_int, *mut *mut *mut c_char, c_int, *mut c_int) -> c_int>(
                    b"MPI_Init_thread\0",
                )
                .map_err(|e| format!("MPI: {e}"))?;
            let mut provided: c_int = 0;
            let rc = init(std::ptr::null_mut(), std::ptr::null_mut(), THREAD_SERIALIZED, &mut provided);
            if rc != 0 {
                return Err(format!("MPI: MPI_Init_thread failed ({rc})"));
            }
            let world = match lib.get::<*mut c_void>(b"ompi_mpi_comm_world\0") {
                Ok(symbol) => World::OpenMpi(*symbol),
                Err(_) => World::Mpich,
            };
            Ok(Mpi { lib, world })
        }
    }

    /// Waits until every rank has called it.
    pub fn barrier(&self) {
        // SAFETY: MPI_Barrier(MPI_Comm) with the world communicator of the loaded ABI.
        let rc = unsafe {
            match self.world {
                World::OpenMpi(comm) => self
                    .lib
                    .get::<unsafe extern "C" fn(*mut c_void) -> c_int>(b"MPI_Barrier\0")
                    .map(|barrier| barrier(comm)),
                World::Mpich => self
                    .lib
                    .get::<unsafe extern "C" fn(c_int) -> c_int>(b"MPI_Barrier\0")
                    .map(|barrier| barrier(MPICH_COMM_WORLD)),
            }
        };
        if !matches!(rc, Ok(0)) {
            tracing::warn!("MPI_Barrier failed: the ranks' points may not line up");
        }
    }

    /// Ends MPI for the process (after the last barrier).
    pub fn finalize(&self) {
        // SAFETY: MPI_Finalize(void), once, at the end of the run.
        unsafe {
            if let Ok(finalize) = self.lib.get::<unsafe extern "C" fn() -> c_int>(b"MPI_Finalize\0") {
                finalize();
            }
        }
    }
}

/// A sweep observer that waits at an MPI barrier before each point starts, so every rank's
/// load of the point begins together.
pub struct LinedUp<'a, O> {
    pub inner: &'a mut O,
    pub mpi: &'a Mpi,
}

impl<O: SweepObserver> SweepObserver for LinedUp<'_, O> {
    fn warm_up_started(&mut self, mode: &LoadMode) {
        self.inner.warm_up_started(mode)
    }
    fn point_late(&mut self, mode: &LoadMode, late: std::time::Duration) {
        self.inner.point_late(mode, late)
    }
    fn point_started(&mut self, mode: &LoadMode) {
        // The load is stopped here: blocking this thread holds up nothing but this rank.
        self.mpi.barrier();
        self.inner.point_started(mode)
    }
    fn window_done(&mut self, window: &WindowProgress) {
        self.inner.window_done(window)
    }
    fn point_done(&mut self, result: &PointResult) -> std::io::Result<()> {
        self.inner.point_done(result)
    }
    fn measured_before(&self, batch: u64, point: LoadPoint) -> Option<PointResult> {
        self.inner.measured_before(batch, point)
    }
}
