//! `winhost`: a narrow, WMI-shaped model of the Windows host for wincsi's native (HostProcess) backend.
//!
//! The facade ([`facade`]) is what the backend asks of Windows: queries, association walks and method calls on the
//! `ROOT\Microsoft\Windows\Storage` and `ROOT\Microsoft\Windows\SMB` classes, and Win32 file, volume and device
//! calls. It models Windows, not the driver: the backend's logic (which objects to query, in what order, how to read
//! return codes and `ExtendedStatus`, idempotency, waits for arrival) sits above it, so the same logic can run
//! against the real host (`win32::WinHost`, `cfg(windows)`) or a simulated one.
//!
//! Platform-independent parts, tested on Linux: the code tables ([`codes`]), method outcomes ([`method`]), error
//! classification ([`error`]), WQL building and escaping ([`wql`]), path forms ([`paths`]), `Location` parsing
//! ([`location`]), page 0x83 and reparse-buffer parsing ([`page83`], [`reparse`]), the on-disk signatures of a RAW
//! disk ([`signature`]), the SMB credential string ([`smb`]), the start-up probe's requirements and report
//! ([`probe`]), and the worker pool ([`pool`]).
//!
//! `reference/windows-native-apis.md` (cited as "reference §N") is the source for the calls and their behaviour;
//! `README.md` lists what is assumed without a source.

pub mod call;
pub mod codes;
pub mod error;
pub mod error_object;
pub mod facade;
pub mod location;
pub mod method;
pub mod model;
pub mod os_build;
pub mod page83;
pub mod paths;
pub mod pool;
pub mod probe;
#[cfg(feature = "remote")]
pub mod remote;
pub mod reparse;
pub mod signature;
pub mod smb;
pub mod uptime;
#[cfg(windows)]
pub mod win32;
pub mod wql;

pub use call::{CallContext, CancelToken};
pub use codes::{HResult, IscsiStatus, StorageReturn, Win32Error};
pub use error::{CallError, CallResult, ErrorKind};
pub use error_object::{ErrorCause, ErrorObject};
pub use facade::{Capabilities, IscsiWmi, SmbWmi, StorageWmi, Win32Files, WindowsHost};
pub use method::{ExtendedStatus, MethodFailure, MethodOutcome, ReturnCode, SmbReturn};
pub use model::ObjectPath;
pub use paths::VolumeGuidPath;
pub use probe::ProbeReport;
