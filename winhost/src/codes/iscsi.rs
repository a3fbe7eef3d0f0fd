//! The iSCSI initiator's status codes (iscsierr.h).

use super::code_table;

code_table! {
    /// An iSCSI initiator status (`ISDSC_STATUS`, iscsierr.h). `0xEFFF....` values are errors, `0xAFFF....` warnings.
    ///
    /// Meanings are the `MessageText`s of iscsierr.h. Through WMI, the `MSFT_iSCSI*` methods may return them as their
    /// `ReturnValue` or fail with them as the call's HRESULT (`reference/windows-native-apis.md` §2.5: which one is
    /// **unverified**); [`crate::HResult::iscsi`] recognises the second form. A method may also return a plain Win32
    /// code ("Error codes can be a standard Windows error code as defined in Winerror.h", iscsierr.h).
    pub enum IscsiStatus: u32, "0x{:08X}" {
        Success = 0 => "The operation completed successfully.",
        NonSpecificError = 0xEFFF_0001 => "A non specific error occurred.",
        LoginFailed = 0xEFFF_0002 => "Login Failed.",
        ConnectionFailed = 0xEFFF_0003 => "Connection Failed.",
        InitiatorNodeAlreadyExists = 0xEFFF_0004 => "Initiator Node Already Exists.",
        InitiatorNodeNotFound = 0xEFFF_0005 => "Initiator Node Does Not Exist.",
        TargetMovedTemporarily = 0xEFFF_0006 => "Target Moved Temporarily.",
        TargetMovedPermanently = 0xEFFF_0007 => "Target Moved Permanently.",
        InitiatorError = 0xEFFF_0008 => "Initiator Error.",
        AuthenticationFailure = 0xEFFF_0009 => "Authentication Failure.",
        AuthorizationFailure = 0xEFFF_000A => "Authorization Failure.",
        NotFound = 0xEFFF_000B => "Not Found.",
        TargetRemoved = 0xEFFF_000C => "Target Removed.",
        UnsupportedVersion = 0xEFFF_000D => "Unsupported Version.",
        TooManyConnections = 0xEFFF_000E => "Too many Connections.",
        MissingParameter = 0xEFFF_000F => "Missing Parameter.",
        CantIncludeInSession = 0xEFFF_0010 => "Can not include in session.",
        SessionTypeNotSupported = 0xEFFF_0011 => "Session type not supported.",
        TargetError = 0xEFFF_0012 => "Target Error.",
        ServiceUnavailable = 0xEFFF_0013 => "Service Unavailable.",
        OutOfResources = 0xEFFF_0014 => "Out of Resources.",
        ConnectionAlreadyExists = 0xEFFF_0015 => "Connections already exist on initiator node.",
        SessionAlreadyExists = 0xEFFF_0016 => "Session Already Exists.",
        InitiatorInstanceNotFound = 0xEFFF_0017 => "Initiator Instance Does Not Exist.",
        TargetAlreadyExists = 0xEFFF_0018 => "Target Already Exists.",
        DriverBug = 0xEFFF_0019 => "The iscsi driver implementation did not complete an operation correctly.",
        InvalidTextKey = 0xEFFF_001A => "An invalid key text was encountered.",
        InvalidSendTargetsText = 0xEFFF_001B => "Invalid SendTargets response text was encountered.",
        InvalidSessionId = 0xEFFF_001C => "Invalid Session Id.",
        ScsiRequestFailed = 0xEFFF_001D => "The scsi request failed.",
        TooManySessions = 0xEFFF_001E => "Exceeded max sessions for this initiator.",
        SessionBusy = 0xEFFF_001F => "Session is busy since a request is already in progress.",
        TargetMappingUnavailable = 0xEFFF_0020 => "The target mapping requested is not available.",
        AddressTypeNotSupported = 0xEFFF_0021 => "The Target Address type given is not supported.",
        LogonFailed = 0xEFFF_0022 => "Logon Failed.",
        SendFailed = 0xEFFF_0023 => "TCP Send Failed.",
        TransportError = 0xEFFF_0024 => "TCP Transport Error",
        VersionMismatch = 0xEFFF_0025 => "iSCSI Version Mismatch",
        TargetMappingOutOfRange = 0xEFFF_0026 => "The Target Mapping Address passed is out of range for the adapter configuration.",
        TargetPresharedKeyUnavailable = 0xEFFF_0027 => "The preshared key for the target or IKE identification payload is not available.",
        TargetAuthInfoUnavailable = 0xEFFF_0028 => "The authentication information for the target is not available.",
        TargetNotFound = 0xEFFF_0029 => "The target name is not found or is marked as hidden from login.",
        LoginUserInfoBad = 0xEFFF_002A => "One or more parameters specified in LoginTargetIN structure is invalid.",
        TargetMappingExists = 0xEFFF_002B => "Given target mapping already exists.",
        HbaSecurityCacheFull = 0xEFFF_002C => "The HBA security information cache is full.",
        InvalidPortNumber = 0xEFFF_002D => "The port number passed is not valid for the initiator.",
        OperationNotAllSuccess = 0xAFFF_002E => "The operation was not successful for all initiators or discovery methods.",
        HbaSecurityCacheNotSupported = 0xEFFF_002F => "The HBA security information cache is not supported by this adapter.",
        IkeIdPayloadTypeNotSupported = 0xEFFF_0030 => "The IKE id payload type specified is not supported.",
        IkeIdPayloadIncorrectSize = 0xEFFF_0031 => "The IKE id payload size specified is not correct.",
        TargetPortalAlreadyExists = 0xEFFF_0032 => "Target Portal Structure Already Exists.",
        TargetAddressAlreadyExists = 0xEFFF_0033 => "Target Address Structure Already Exists.",
        NoAuthInfoAvailable = 0xEFFF_0034 => "There is no IKE authentication information available.",
        NoTunnelOuterModeAddress = 0xEFFF_0035 => "There is no tunnel mode outer address specified.",
        CacheCorrupted = 0xEFFF_0036 => "Authentication or tunnel address cache is corrupted.",
        RequestNotSupported = 0xEFFF_0037 => "The request or operation is not supported.",
        TargetOutOfResources = 0xEFFF_0038 => "The target does not have enough resources to process the given request.",
        ServiceDidNotRespond = 0xEFFF_0039 => "The initiator service did not respond to the request sent by the driver.",
        IsnsServerNotFound = 0xEFFF_003A => "The Internet Storage Name Server (iSNS) server was not found or is unavailable.",
        OperationRequiresReboot = 0xAFFF_003B => "The operation was successful but requires a driver reload or reboot to become effective.",
        NoPortalSpecified = 0xEFFF_003C => "There is no target portal available to complete the login.",
        CantRemoveLastConnection = 0xEFFF_003D => "Cannot remove the last connection for a session.",
        ServiceNotRunning = 0xEFFF_003E => "The Microsoft iSCSI Initiator Service is not running. Please start the service and retry.",
        TargetAlreadyLoggedIn = 0xEFFF_003F => "The target has already been logged in via an iSCSI session.",
        DeviceBusyOnSession = 0xEFFF_0040 => "The session cannot be logged out since a device on that session is currently being used.",
        CouldNotSavePersistentLoginData = 0xEFFF_0041 => "Failed to save persistent login information.",
        CouldNotRemovePersistentLoginData = 0xEFFF_0042 => "Failed to remove persistent login information.",
        PortalNotFound = 0xEFFF_0043 => "The specified portal was not found.",
        InitiatorNotFound = 0xEFFF_0044 => "The specified initiator name was not found.",
        DiscoveryMechanismNotFound = 0xEFFF_0045 => "The specified discovery mechanism was not found.",
        IpsecNotSupportedOnOs = 0xEFFF_0046 => "iSCSI does not support IPSEC for this version of the OS.",
        PersistentLoginTimeout = 0xEFFF_0047 => "The iSCSI service timed out waiting for all persistent logins to complete.",
        ShortChapSecret = 0xAFFF_0048 => "The specified CHAP secret is less than 96 bits and will not be usable for authenticating over non ipsec connections.",
        EvaluationPeriodExpired = 0xEFFF_0049 => "The evaluation period for the iSCSI initiator service has expired.",
        InvalidChapSecret = 0xEFFF_004A => "CHAP secret given does not conform to the standard. Please see system event log for more information.",
        InvalidTargetChapSecret = 0xEFFF_004B => "Target CHAP secret given is invalid. Maximum size of CHAP secret is 16 bytes. Minimum size is 12 bytes if IPSec is not used.",
        InvalidInitiatorChapSecret = 0xEFFF_004C => "Initiator CHAP secret given is invalid. Maximum size of CHAP secret is 16 bytes. Minimum size is 12 bytes if IPSec is not used.",
        InvalidChapUserName = 0xEFFF_004D => "CHAP Username given is invalid.",
        InvalidLogonAuthType = 0xEFFF_004E => "Logon Authentication type given is invalid.",
        InvalidTargetMapping = 0xEFFF_004F => "Target Mapping information given is invalid.",
        InvalidTargetId = 0xEFFF_0050 => "Target Id given in Target Mapping is invalid.",
        InvalidIscsiName = 0xEFFF_0051 => "The iSCSI name specified contains invalid characters or is too long.",
        IncompatibleIsnsVersion = 0xEFFF_0052 => "The version number returned from the Internet Storage Name Server (iSNS) server is not compatible with this version of the iSNS client.",
        FailedToConfigureIpsec = 0xEFFF_0053 => "Initiator failed to configure IPSec for the given connection. This could be because of low resources.",
        BufferTooSmall = 0xEFFF_0054 => "The buffer given for processing the request is too small.",
        InvalidLoadBalancePolicy = 0xEFFF_0055 => "The given Load Balance policy is not recognized by iScsi initiator.",
        InvalidParameter = 0xEFFF_0056 => "One or more paramaters specified is not valid.",
        DuplicatePathSpecified = 0xEFFF_0057 => "Duplicate PathIds were specified in the call to set Load Balance Policy.",
        PathCountMismatch = 0xEFFF_0058 => "Number of paths specified in Set Load Balance Policy does not match the number of paths to the target.",
        InvalidPathId = 0xEFFF_0059 => "Path Id specified in the call to set Load Balance Policy is not valid",
        MultiplePrimaryPathsSpecified = 0xEFFF_005A => "Multiple primary paths specified when only one primary path is expected.",
        NoPrimaryPathSpecified = 0xEFFF_005B => "No primary path specified when at least one is expected.",
        DeviceAlreadyPersistentlyBound = 0xEFFF_005C => "Device is already a persistently bound device.",
        DeviceNotFound = 0xEFFF_005D => "Device was not found.",
        DeviceNotIscsiOrPersistent = 0xEFFF_005E => "The device specified does not originate from an iSCSI disk or a persistent iSCSI login.",
        DnsNameUnresolved = 0xEFFF_005F => "The DNS name specified was not resolved.",
        NoConnectionAvailable = 0xEFFF_0060 => "There is no connection available in the iSCSI session to process the request.",
        LbPolicyNotSupported = 0xEFFF_0061 => "The given Load Balance policy is not supported.",
        RemoveConnectionInProgress = 0xEFFF_0062 => "A remove connection request is already in progress for this session.",
        InvalidConnectionId = 0xEFFF_0063 => "Given connection was not found in the session.",
        CannotRemoveLeadingConnection = 0xEFFF_0064 => "The leading connection in the session cannot be removed.",
        RestrictedByGroupPolicy = 0xEFFF_0065 => "The operation cannot be performed since it does not conform with the group policy assigned to this computer.",
        IsnsFirewallBlocked = 0xEFFF_0066 => "The operation cannot be performed since the Internet Storage Name Server (iSNS) firewall exception has not been enabled.",
        FailureToPersistLbPolicy = 0xEFFF_0067 => "Failed to persist load balancing policy parameters.",
        InvalidHost = 0xEFFF_0068 => "The name could not be resolved to an IP Address.",
    }
}

impl IscsiStatus {
    /// Success or a warning (`0xAFFF....`: the operation was done; for example `ShortChapSecret` after
    /// `SetCHAPSecret`, reference §2.5).
    pub fn is_success_or_warning(self) -> bool {
        self == Self::Success || self.code() & 0xC000_0000 == 0x8000_0000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn severity_separates_warnings_from_errors() {
        assert!(IscsiStatus::Success.is_success_or_warning());
        assert!(IscsiStatus::ShortChapSecret.is_success_or_warning());
        assert!(IscsiStatus::OperationRequiresReboot.is_success_or_warning());
        assert!(!IscsiStatus::TargetAlreadyLoggedIn.is_success_or_warning());
        assert!(!IscsiStatus::Unknown(5).is_success_or_warning());
    }
}
