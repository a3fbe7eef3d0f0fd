//! Win32 error codes the native backend meets.

use super::code_table;

code_table! {
    /// A Win32 error code (`GetLastError`, or the low 16 bits of a `0x8007xxxx` HRESULT).
    ///
    /// Meanings: Microsoft's "System Error Codes" pages (0-499, 1000-1299, 1300-1699, 4000-5999). Which call returns
    /// which code, and how the native backend reads it, is in `reference/windows-native-apis.md` §1.4 and §2.
    pub enum Win32Error: u32, "{}" {
        InvalidFunction = 1 => "Incorrect function.",
        FileNotFound = 2 => "The system cannot find the file specified.",
        PathNotFound = 3 => "The system cannot find the path specified.",
        AccessDenied = 5 => "Access is denied.",
        WriteProtect = 19 => "The media is write protected.",
        SharingViolation = 32 => "The process cannot access the file because it is being used by another process.",
        NotSupported = 50 => "The request is not supported.",
        BadNetPath = 53 => "The network path was not found.",
        NetNameDeleted = 64 => "The specified network name is no longer available.",
        BadNetName = 67 => "The network name cannot be found.",
        FileExists = 80 => "The file exists.",
        AlreadyAssigned = 85 => "The local device name is already in use.",
        InvalidPassword = 86 => "The specified network password is not correct.",
        InvalidParameter = 87 => "The parameter is incorrect.",
        CallNotImplemented = 120 => "This function is not supported on this system.",
        InsufficientBuffer = 122 => "The data area passed to a system call is too small.",
        InvalidName = 123 => "The filename, directory name, or volume label syntax is incorrect.",
        DirNotEmpty = 145 => "The directory is not empty.",
        BadPathname = 161 => "The specified path is invalid.",
        AlreadyExists = 183 => "Cannot create a file when that file already exists.",
        MoreData = 234 => "More data is available.",
        Directory = 267 => "The directory name is invalid.",
        UnrecognizedVolume = 1005 => "The volume does not contain a recognized file system.",
        SessionCredentialConflict = 1219 => "Multiple connections to a server or shared resource by the same user, using more than one user name, are not allowed.",
        NetworkUnreachable = 1231 => "The network location cannot be reached.",
        HostUnreachable = 1232 => "The network location cannot be reached (host unreachable).",
        NotAllAssigned = 1300 => "Not all privileges or groups referenced are assigned to the caller.",
        NoSuchLogonSession = 1312 => "A specified logon session does not exist. It may already have been terminated.",
        NoSuchPrivilege = 1313 => "A specified privilege does not exist.",
        PrivilegeNotHeld = 1314 => "A required privilege is not held by the client.",
        LogonFailure = 1326 => "The user name or password is incorrect.",
        AccountRestriction = 1327 => "Account restrictions are preventing this user from signing in.",
        InvalidLogonHours = 1328 => "Your account has time restrictions that keep you from signing in right now.",
        InvalidWorkstation = 1329 => "This user isn't allowed to sign in to this computer.",
        PasswordExpired = 1330 => "The password for this account has expired.",
        AccountDisabled = 1331 => "This user can't sign in because this account is currently disabled.",
        LogonTypeNotGranted = 1385 => "Logon failure: the user has not been granted the requested logon type at this computer.",
        AccountExpired = 1793 => "The user's account has expired.",
        PasswordMustChange = 1907 => "The user's password must be changed before signing in.",
        AccountLockedOut = 1909 => "The referenced account is currently locked out and may not be logged on to.",
        SymlinkClassDisabled = 1463 => "The symbolic link cannot be followed because its type is disabled.",
        CantAccessFile = 1920 => "The file cannot be accessed by the system.",
        NotAReparsePoint = 4390 => "The file or directory is not a reparse point.",
    }
}

impl Win32Error {
    /// Whether the code says a logon was refused: the credentials (or the account) are not accepted any more —
    /// 1326 `ERROR_LOGON_FAILURE`, 86 `ERROR_INVALID_PASSWORD`, 1312 `ERROR_NO_SUCH_LOGON_SESSION` (what
    /// `New-SmbGlobalMapping` answers for a user name without a domain), and the `ERROR_ACCOUNT_*`/`ERROR_PASSWORD_*`
    /// logon refusals 1327-1331, 1385, 1793, 1907, 1909 (Microsoft's "System Error Codes (1300-1699)" and
    /// "(1700-3999)"; an SMB session setup refused with `STATUS_LOGON_FAILURE` 0xC000006D, `STATUS_ACCOUNT_DISABLED`
    /// 0xC0000072, `STATUS_ACCOUNT_LOCKED_OUT` 0xC0000234, `STATUS_PASSWORD_EXPIRED` 0xC0000071 … reaches a Win32
    /// caller as these, through `RtlNtStatusToDosError`). Access denied (5) is not one: the logon worked and the
    /// object's permissions refused.
    pub fn is_logon_refused(self) -> bool {
        matches!(
            self,
            Self::LogonFailure
                | Self::InvalidPassword
                | Self::NoSuchLogonSession
                | Self::AccountRestriction
                | Self::InvalidLogonHours
                | Self::InvalidWorkstation
                | Self::PasswordExpired
                | Self::AccountDisabled
                | Self::LogonTypeNotGranted
                | Self::AccountExpired
                | Self::PasswordMustChange
                | Self::AccountLockedOut
        )
    }

    /// Whether the code says the path (or an intermediate directory) does not exist: 2 or 3. A missing *share*
    /// (53, 67) is an error of its own kind, never "absent" (`reference/windows-native-apis.md` §2.1, PathExists).
    pub fn is_not_found(self) -> bool {
        matches!(self, Self::FileNotFound | Self::PathNotFound)
    }
}
