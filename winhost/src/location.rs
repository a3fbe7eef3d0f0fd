//! Parsing `MSFT_Disk.Location`.
//!
//! Two forms exist:
//! - What nodes report and csi-proxy parses: `PCI Slot 3 : Adapter 0 : Port 0 : Target 1 : LUN 0` (csi-proxy
//!   `pkg/os/disk/api.go:66-117`, reference §2.3). [`CsiProxyLocation::parse`] reproduces csi-proxy's rules exactly.
//! - What Microsoft's `MSFT_Disk` page documents: `PCIROOT(0)#PCI(1C00)#PCI(0000)#SCSI(P00T01L01)`, the adapter's
//!   PnP location path then `BUS(PxxTyyLzz)` (`C` instead of `P` for ATA). [`PnpLocation::parse`] reads it; which
//!   radix the two-digit numbers use is not documented (the examples are all below 10): we read them as decimal
//!   (**unverified**).

/// A location parsed the way csi-proxy does. Fields csi-proxy did not find stay empty.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CsiProxyLocation {
    /// `Adapter N`.
    pub adapter: String,
    /// `Bus N` (csi-proxy@master only; v1.3.0 and earlier never fill it: reference §3.1 of csi-proxy-api.md).
    pub bus: String,
    /// `Target N`.
    pub target: String,
    /// `LUN N`.
    pub lun: String,
}

impl CsiProxyLocation {
    /// csi-proxy's rules: split on `:`; fewer than 5 items → not listed; trim each item and split it on single
    /// spaces; only items of exactly two tokens count (`Adapter`, `Target`, `LUN`; master also `Bus`); other
    /// two-token items (`Port 0`) are dropped; the disk is listed when at least one two-token item was seen.
    pub fn parse(location: &str) -> Option<Self> {
        let items: Vec<&str> = location.split(':').collect();
        if items.len() < 5 {
            return None;
        }
        let mut found = false;
        let mut loc = Self::default();
        for item in items {
            let tokens: Vec<&str> = item.trim().split(' ').collect();
            if tokens.len() != 2 {
                continue;
            }
            found = true;
            let value = tokens[1].trim().to_owned();
            match tokens[0].trim() {
                "Adapter" => loc.adapter = value,
                "Bus" => loc.bus = value,
                "Target" => loc.target = value,
                "LUN" => loc.lun = value,
                _ => {}
            }
        }
        found.then_some(loc)
    }
}

/// A location in the documented PnP form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PnpLocation {
    /// The adapter's PnP location path (everything before the last `#`).
    pub adapter_path: String,
    /// The bus type text: `SCSI`, `SAS`, `RAID` or `ATA`.
    pub bus_type: String,
    /// `PathId` (`SCSI_ADDRESS.PathId`).
    pub path_id: u32,
    /// `TargetId`.
    pub target_id: u32,
    /// `Lun`.
    pub lun: u32,
}

impl PnpLocation {
    /// Parse `…#BUS(PxxTyyLzz)` (or `Cxx` for ATA).
    pub fn parse(location: &str) -> Option<Self> {
        let location = location.trim();
        let (adapter_path, last) = location.rsplit_once('#')?;
        let (bus_type, inner) = last.strip_suffix(')')?.split_once('(')?;
        if bus_type.is_empty() || !bus_type.bytes().all(|b| b.is_ascii_uppercase()) {
            return None;
        }
        let inner = inner
            .strip_prefix('P')
            .or_else(|| inner.strip_prefix('C'))?;
        let (path_id, rest) = inner.split_once('T')?;
        let (target_id, lun) = rest.split_once('L')?;
        let num = |s: &str| -> Option<u32> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                None
            } else {
                s.parse().ok()
            }
        };
        Some(Self {
            adapter_path: adapter_path.to_owned(),
            bus_type: bus_type.to_owned(),
            path_id: num(path_id)?,
            target_id: num(target_id)?,
            lun: num(lun)?,
        })
    }
}

/// Either form, as the native backend needs it (target and LUN).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DiskLocation {
    /// The `… : Adapter N : … : Target N : LUN N` form.
    CsiProxy(CsiProxyLocation),
    /// The documented `…#BUS(PxxTyyLzz)` form.
    Pnp(PnpLocation),
}

impl DiskLocation {
    /// Parse either form (csi-proxy's first, as it is what nodes report).
    pub fn parse(location: &str) -> Option<Self> {
        CsiProxyLocation::parse(location)
            .map(Self::CsiProxy)
            .or_else(|| PnpLocation::parse(location).map(Self::Pnp))
    }

    /// The LUN, when the location names one.
    pub fn lun(&self) -> Option<u32> {
        match self {
            Self::CsiProxy(l) => l.lun.parse().ok(),
            Self::Pnp(l) => Some(l.lun),
        }
    }

    /// The target id, when the location names one.
    pub fn target(&self) -> Option<u32> {
        match self {
            Self::CsiProxy(l) => l.target.parse().ok(),
            Self::Pnp(l) => Some(l.target_id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csi_proxy_examples() {
        assert_eq!(
            CsiProxyLocation::parse("PCI Slot 3 : Adapter 0 : Port 0 : Target 1 : LUN 0"),
            Some(CsiProxyLocation {
                adapter: "0".into(),
                bus: String::new(),
                target: "1".into(),
                lun: "0".into()
            })
        );
        assert_eq!(
            CsiProxyLocation::parse("Integrated : Adapter 3 : Port 0 : Target 0 : LUN 1")
                .map(|l| l.lun),
            Some("1".into())
        );
        // NVMe: Bus counts (master), Device/Function are dropped; no Target or LUN.
        assert_eq!(
            CsiProxyLocation::parse("Integrated : Bus 2 : Device 0 : Function 0 : Adapter 0"),
            Some(CsiProxyLocation {
                adapter: "0".into(),
                bus: "2".into(),
                target: String::new(),
                lun: String::new()
            })
        );
    }

    #[test]
    fn csi_proxy_edge_rules() {
        // Fewer than five items: skipped.
        assert_eq!(
            CsiProxyLocation::parse("Adapter 0 : Target 1 : LUN 0"),
            None
        );
        // Five items but no two-token item: skipped.
        assert_eq!(CsiProxyLocation::parse("a : b : c : d : e"), None);
        // Double spaces make three tokens: that item does not count (Go's strings.Split on " ").
        assert_eq!(
            CsiProxyLocation::parse("PCI Slot 3 : Adapter  0 : Port 0 : Target 1 : LUN 7"),
            Some(CsiProxyLocation {
                adapter: String::new(),
                bus: String::new(),
                target: "1".into(),
                lun: "7".into()
            })
        );
        // Extra colons are fine; later items win.
        assert_eq!(
            CsiProxyLocation::parse("x : LUN 1 : y : z : LUN 2 : w").map(|l| l.lun),
            Some("2".into())
        );
        // Keys are case-sensitive, as in csi-proxy.
        assert_eq!(
            CsiProxyLocation::parse("x : lun 1 : y : z : w"),
            Some(CsiProxyLocation::default())
        );
    }

    #[test]
    fn documented_pnp_examples() {
        let scsi = PnpLocation::parse("PCIROOT(0)#PCI(1C00)#PCI(0000)#SCSI(P00T01L01)").unwrap();
        assert_eq!(
            (
                scsi.adapter_path.as_str(),
                scsi.bus_type.as_str(),
                scsi.path_id,
                scsi.target_id,
                scsi.lun
            ),
            ("PCIROOT(0)#PCI(1C00)#PCI(0000)", "SCSI", 0, 1, 1)
        );
        let ata = PnpLocation::parse("PCIROOT(0)#PCI(0100)#ATA(C01T03L00)").unwrap();
        assert_eq!(
            (ata.bus_type.as_str(), ata.path_id, ata.target_id, ata.lun),
            ("ATA", 1, 3, 0)
        );
        assert_eq!(
            PnpLocation::parse("PCIROOT(1)#PCI(0300)#SAS(P00T03L00)")
                .unwrap()
                .target_id,
            3
        );
        assert_eq!(
            PnpLocation::parse("PCIROOT(0)#PCI(0200)#PCI(0003)#PCI(0100)#RAID(P02T00L00)")
                .unwrap()
                .path_id,
            2
        );
        for bad in [
            "",
            "SCSI(P00T01L01)",
            "PCIROOT(0)#SCSI(P00T01)",
            "PCIROOT(0)#SCSI(X00T01L01)",
            "PCIROOT(0)#scsi(P0T1L1)",
            "PCIROOT(0)#SCSI(PT1L1)",
        ] {
            assert_eq!(PnpLocation::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn either_form() {
        let a = DiskLocation::parse("PCI Slot 3 : Adapter 0 : Port 0 : Target 1 : LUN 4").unwrap();
        assert_eq!((a.target(), a.lun()), (Some(1), Some(4)));
        let b = DiskLocation::parse("PCIROOT(0)#PCI(1C00)#SCSI(P00T02L05)").unwrap();
        assert_eq!((b.target(), b.lun()), (Some(2), Some(5)));
        let nvme =
            DiskLocation::parse("Integrated : Bus 2 : Device 0 : Function 0 : Adapter 0").unwrap();
        assert_eq!(nvme.lun(), None);
        assert_eq!(DiskLocation::parse("Hyper-V"), None);
    }
}
