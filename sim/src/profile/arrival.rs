//! When disks and volumes appear on the simulated node ([`Arrival`], `host.behaviour.arrival`).
//!
//! On Windows a LUN's disk, and a disk's volumes, arrive through Plug and Play some time after what caused them: a
//! login, `SetDiskState(online)` / `MSFT_Disk.Online`, `PartitionDisk` / `CreatePartition`, a boot. No csi-proxy
//! release waits for any of it (v1.1.3 `pkg/os/disk/api.go:122-129,166-173,345-353`; v1.3.0 `pkg/os/disk/api.go:
//! 119-127,177-223,387-411`), and the storage provider's cache (`MSFT_Disk`, `MSFT_Volume`, …) lags the arrivals
//! until `Update-HostStorageCache` / `MSFT_StorageSetting.UpdateHostStorageCache` (csi-proxy's `Rescan`) or
//! `MSFT_Disk.Refresh` refreshes it — which shows what has arrived and hurries nothing that has not (reference
//! `windows-native-apis.md` §3, "arrival waits": "a 'not found' right after `Connect` or `Online` is normal").
//!
//! The delays are **unverified** (no source gives them; `docs/real-node-checks.md` checks 13, 21 and 22 measure
//! them). The defaults are chosen at least as slow as the gap between the calls a driver makes after onlining a
//! disk on a WMI-era node (a few hundred milliseconds; `shared/reference/csi-proxy-versions.md` N1), so every
//! "look right after" of a suite misses, and small enough that suites over real sockets stay fast. Tests that need
//! a host where everything is there at once say so with [`ArrivalModel::Instant`].

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Whether arrivals take time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArrivalModel {
    /// Every arrival has its delay and the storage cache lags (the default of every scenario).
    #[default]
    Realistic,
    /// Everything appears at once and the cache never lags: an explicit switch for tests that need it. A LUN's own
    /// `arrival_delay_ms` / `volume_arrival_delay_ms`, when given, still apply.
    Instant,
}

/// The delays of each kind of arrival (milliseconds) and of the storage cache (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Arrival {
    /// Realistic (default) or instant.
    pub model: ArrivalModel,
    /// A LUN's disk after the login that brings it (also after a boot's persistent login); a LUN's
    /// `arrival_delay_ms` overrides it. Default 500.
    pub disk_ms: u64,
    /// A disk's volumes after it comes online (`SetDiskState`, `Online()`, or a LUN arriving online); a LUN's
    /// `volume_arrival_delay_ms` overrides it. Default 500.
    pub volumes_after_online_ms: u64,
    /// The volume of a partition `PartitionDisk` / `CreatePartition` made (the partition itself is listed at once:
    /// the call returns it). Default 500.
    pub volume_after_partition_ms: u64,
    /// How long after an arrival the storage cache shows it by itself; a `Rescan` (`UpdateHostStorageCache`) or
    /// the disk's `MSFT_Disk.Refresh` shows it at once — but only once it has arrived. Default 500.
    pub cache_lag_ms: u64,
}

impl Default for Arrival {
    fn default() -> Self {
        Arrival {
            model: ArrivalModel::Realistic,
            disk_ms: 500,
            volumes_after_online_ms: 500,
            volume_after_partition_ms: 500,
            cache_lag_ms: 500,
        }
    }
}

impl Arrival {
    /// Everything at once (the explicit switch).
    pub const INSTANT: Arrival = Arrival {
        model: ArrivalModel::Instant,
        disk_ms: 0,
        volumes_after_online_ms: 0,
        volume_after_partition_ms: 0,
        cache_lag_ms: 0,
    };

    /// The realistic model with every delay `ms` (suites whose many cells must stay fast scale them down).
    pub const fn realistic(ms: u64) -> Arrival {
        Arrival {
            model: ArrivalModel::Realistic,
            disk_ms: ms,
            volumes_after_online_ms: ms,
            volume_after_partition_ms: ms,
            cache_lag_ms: ms,
        }
    }

    fn ms(&self, ms: u64) -> Duration {
        match self.model {
            ArrivalModel::Realistic => Duration::from_millis(ms),
            ArrivalModel::Instant => Duration::ZERO,
        }
    }

    /// A LUN's disk after a login, unless the LUN says otherwise.
    pub fn disk(&self, lun: Option<u64>) -> Duration {
        lun.map_or_else(|| self.ms(self.disk_ms), Duration::from_millis)
    }

    /// A disk's volumes after it comes online, unless the LUN says otherwise.
    pub fn volumes_after_online(&self, lun: Option<u64>) -> Duration {
        lun.map_or_else(
            || self.ms(self.volumes_after_online_ms),
            Duration::from_millis,
        )
    }

    /// A new partition's volume.
    pub fn volume_after_partition(&self) -> Duration {
        self.ms(self.volume_after_partition_ms)
    }

    /// The storage cache's lag behind an arrival.
    pub fn cache_lag(&self) -> Duration {
        self.ms(self.cache_lag_ms)
    }
}
