//! Connections that stop answering: csi-proxy's pipe instances after a restart under Wine took the driver's new
//! connections and never answered on them, for as long as anyone watched (the reference's T5(c)). A test silences
//! the connections of an API group that are open now ([`SimHost::silence_connections`]): from then on, what arrives
//! on them is read and dropped, nothing is sent back (an answer in progress is lost), and a client that closes one
//! closes it. Connections opened afterwards are served. Only the served endpoints (Unix sockets, named pipes) count
//! and can be silenced, not `inproc`.

use std::sync::atomic::{AtomicU64, Ordering};

use proxy_client::ApiGroup;

use crate::host::SimHost;

/// Per API group: connections accepted, and up to which of them (by acceptance order) are silent.
#[derive(Debug, Default)]
pub(crate) struct ConnectionLog {
    groups: [Group; ApiGroup::ALL.len()],
}

#[derive(Debug, Default)]
struct Group {
    accepted: AtomicU64,
    silent_upto: AtomicU64,
}

fn index(group: ApiGroup) -> usize {
    ApiGroup::ALL
        .iter()
        .position(|g| *g == group)
        .unwrap_or_default()
}

impl ConnectionLog {
    /// A connection of `group` was accepted: its number (1 = the first).
    pub(crate) fn accepted(&self, group: ApiGroup) -> u64 {
        self.groups[index(group)]
            .accepted
            .fetch_add(1, Ordering::SeqCst)
            + 1
    }

    /// Whether connection `serial` of `group` is silent.
    pub(crate) fn is_silent(&self, group: ApiGroup, serial: u64) -> bool {
        serial <= self.groups[index(group)].silent_upto.load(Ordering::SeqCst)
    }
}

impl SimHost {
    /// Every connection of `group` open now stops answering (see `serve::silence`): what arrives on it is dropped,
    /// nothing comes back. Connections opened later are served. Returns how many connections the group accepted so
    /// far (all of them silent now).
    pub fn silence_connections(&self, group: ApiGroup) -> u64 {
        let g = &self.connection_log().groups[index(group)];
        let upto = g.accepted.load(Ordering::SeqCst);
        g.silent_upto.fetch_max(upto, Ordering::SeqCst);
        tracing::info!(%group, connections = upto, "connections silenced");
        upto
    }

    /// How many connections of `group` its endpoint accepted (over every csi-proxy restart).
    pub fn connections_accepted(&self, group: ApiGroup) -> u64 {
        self.connection_log().groups[index(group)]
            .accepted
            .load(Ordering::SeqCst)
    }
}
