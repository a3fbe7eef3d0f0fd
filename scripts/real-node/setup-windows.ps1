<#
.SYNOPSIS
  Windows-only set-up for the real-node workflow (.github/workflows/windows-real-node.yml): csi-proxy built from
  source and run as a service, a local SMB share with its own account, and a local iSCSI target with a fresh scratch
  LUN. Everything it creates is named wincsi-check*.

.DESCRIPTION
  Runs under Windows PowerShell 5.1 (powershell.exe), as csi-proxy's own CI and its integration set-up do, and refuses
  PowerShell 7: there the ServerManager and iSCSI Target cmdlets load only through the Windows PowerShell
  compatibility session, whose objects are deserialised (a LUN mapping's .Path becomes a string), and New-LocalUser
  has failed in PowerShell 7.3+ on some builds (PowerShell#18624, #21645). Every native command's exit code is checked.

  -CsiProxySource DIR  build DIR (a checkout of kubernetes-csi/csi-proxy at a ref; Go on PATH) into
                       C:\etc\kubernetes\node\bin\csi-proxy.exe and (re)install the csiproxy service with the flags of
                       csi-proxy's README and CI, plus -kubelet-path C:\var\lib\kubelet; waits (bounded) for the six
                       named pipes the driver dials.
  -Smb                 create the local account wincsi-check (random password) and the share
                       \\<computer>\wincsi-check (folder C:\wincsi-check\share, subfolder check).
  -Iscsi               the first time: install FS-iSCSITarget-Server if missing (it needs no restart; one that asks for
                       a restart is an error), start MSiSCSI, allow loopback logins and create the target wincsi-check
                       for any initiator on this machine's NIC IPv4 address — never 127.0.0.1, which the target does
                       not serve — exactly as csi-proxy's integration set-up does
                       (kubernetes-csi/csi-proxy@v1.3.0 integrationtests/iscsi_ps_scripts.go:29-30 AllowLoopBack=1 and
                       Restart-Service WinTarget; :44 the "Ethernet" IPv4, "not 127.0.0.1"; :51 -InitiatorIds Iqn:*);
                       prints the target server's settings. Every time: a fresh 1 GiB scratch LUN 0 (the target's
                       sessions logged out and the previous LUN removed first; a VHDX WinTarget still holds is left); then the
                       portal added on the initiator and a target wincsi-check-late-<ticks> (64 MiB LUN 0) created
                       after it, for check-node's discovery check (--iscsi-late-iqn, real-node check 25).
  -RemoveCsiProxy      stop and delete the csiproxy service.
  -AssertNoCsiProxy    fail if any csi-proxy pipe exists (the native backend's runs must not be served by csi-proxy).
  Outputs go to $env:GITHUB_ENV when set (WINCSI_CHECK_SMB_SHARE, WINCSI_CHECK_SMB_USERNAME, WINCSI_CHECK_SMB_PASSWORD
  (masked), WINCSI_CHECK_ISCSI_PORTAL, WINCSI_CHECK_ISCSI_IQN, WINCSI_CHECK_ISCSI_LUN,
  WINCSI_CHECK_ISCSI_LATE_IQN), else to the console.
#>
param(
    [string]$CsiProxySource,
    [switch]$Smb,
    [switch]$Iscsi,
    [switch]$RemoveCsiProxy,
    [switch]$AssertNoCsiProxy
)
$ErrorActionPreference = 'Stop'
$ProgressPreference = 'SilentlyContinue'
Set-StrictMode -Version Latest

if ($PSVersionTable.PSEdition -ne 'Desktop') {
    throw "setup-windows.ps1 runs under Windows PowerShell 5.1 (powershell.exe), not PowerShell $($PSVersionTable.PSVersion)"
}

$TargetName = 'wincsi-check'
# The csi-proxy endpoints the driver dials (charts/wincsi/templates/_helpers.tpl, wincsi.csiProxyPipes).
$Pipes = 'disk-v1', 'volume-v1', 'filesystem-v1', 'smb-v1', 'iscsi-v1alpha2', 'system-v1alpha1'

function Set-Output([string]$Name, [string]$Value, [switch]$Secret) {
    if ($Secret) { Write-Host "::add-mask::$Value" }
    if ($env:GITHUB_ENV) {
        # UTF-8 without a byte order mark: Windows PowerShell's -Encoding utf8 would write one into an empty file.
        [IO.File]::AppendAllText($env:GITHUB_ENV, "$Name=$Value`n", (New-Object Text.UTF8Encoding $false))
    } elseif (-not $Secret) {
        Write-Host "$Name=$Value"
    }
    Set-Item -Path "env:$Name" -Value $Value
}

function Invoke-Native([string]$What, [scriptblock]$Command) {
    # A native command reports failure only through its exit code, which PowerShell does not turn into an error.
    # Its stderr must not become a terminating error either (Windows PowerShell wraps redirected stderr lines).
    $eap = $ErrorActionPreference
    $ErrorActionPreference = 'Continue'
    try {
        $out = @(& $Command 2>&1 | ForEach-Object { "$_" })
        $code = $LASTEXITCODE
    } finally {
        $ErrorActionPreference = $eap
    }
    $out | ForEach-Object { Write-Host "  $_" }
    if ($code -ne 0) { throw "$What failed with exit code ${code}: $($out -join ' ')" }
}

function Wait-Until([scriptblock]$Condition, [int]$Seconds, [string]$What) {
    # Waiting for an external service to come up (not test synchronisation): bounded.
    $deadline = (Get-Date).AddSeconds($Seconds)
    while (-not (& $Condition)) {
        if ((Get-Date) -gt $deadline) { throw "timed out after ${Seconds}s waiting for $What" }
        Start-Sleep -Milliseconds 500
    }
}

function Get-CsiProxyPipes {
    # [IO.Directory]::GetFiles on the pipe root, as csi-proxy's CI lists them (Get-ChildItem there was broken in
    # PowerShell 7.0, PowerShell#11898).
    @([IO.Directory]::GetFiles('\\.\pipe\') | ForEach-Object { Split-Path -Leaf $_ } | Where-Object { $_ -like 'csi-proxy-*' })
}

function Remove-CsiProxyService {
    if (Get-Service -Name csiproxy -ErrorAction SilentlyContinue) {
        Stop-Service -Name csiproxy -Force
        Invoke-Native 'sc.exe delete csiproxy' { sc.exe delete csiproxy }
        Wait-Until { @(Get-CsiProxyPipes).Count -eq 0 } 60 'the csi-proxy pipes to go'
        Write-Host 'csiproxy service removed; no csi-proxy pipe is left'
    }
}

function Get-PortalAddress {
    # csi-proxy's set-up takes the IPv4 address of the adapter named "Ethernet"; adapter names differ between images,
    # so take the interface of the default route, and never a loopback or link-local address.
    $route = Get-NetRoute -AddressFamily IPv4 -DestinationPrefix '0.0.0.0/0' |
        Sort-Object -Property @{ Expression = { $_.RouteMetric + $_.InterfaceMetric } } | Select-Object -First 1
    if (-not $route) { throw 'no IPv4 default route: no NIC address to serve the iSCSI target on' }
    $address = Get-NetIPAddress -AddressFamily IPv4 -InterfaceIndex $route.ifIndex |
        Where-Object { $_.IPAddress -notlike '127.*' -and $_.IPAddress -notlike '169.254.*' } |
        Select-Object -First 1
    if (-not $address) { throw "interface $($route.InterfaceAlias) has no usable IPv4 address" }
    $address.IPAddress
}

function Install-IscsiTarget {
    $feature = Get-WindowsFeature -Name FS-iSCSITarget-Server
    if (-not $feature) { throw 'this Windows has no FS-iSCSITarget-Server feature' }
    if (-not $feature.Installed) {
        # Not preinstalled on windows-2022/2025 (it was on the 2016/2019 images); it installs without a restart.
        $r = Install-WindowsFeature -Name FS-iSCSITarget-Server
        if (-not $r.Success -or "$($r.RestartNeeded)" -eq 'Yes') {
            throw "installing FS-iSCSITarget-Server: Success=$($r.Success) RestartNeeded=$($r.RestartNeeded)"
        }
        Write-Host 'installed FS-iSCSITarget-Server'
    }
    Import-Module IscsiTarget
    Set-Service -Name MSiSCSI -StartupType Automatic | Out-Null
    Start-Service -Name MSiSCSI | Out-Null
    # The target refuses an initiator on its own machine unless loopback is allowed (read when WinTarget starts).
    $key = 'HKLM:\SOFTWARE\Microsoft\iSCSI Target'
    if (-not (Test-Path $key)) { New-Item -Path $key -Force | Out-Null }
    $current = Get-ItemProperty -Path $key -Name AllowLoopBack -ErrorAction SilentlyContinue
    if (-not $current -or $current.AllowLoopBack -ne 1) {
        Set-ItemProperty -Path $key -Name AllowLoopBack -Value 1
        Restart-Service -Name WinTarget
    }
    Write-Host 'iSCSI target server settings:'
    Get-IscsiTargetServerSetting | Format-List * | Out-String -Width 200 | Write-Host
    Write-Host "AllowLoopBack = $((Get-ItemProperty -Path $key).AllowLoopBack)"
}

function Remove-LunFile([string]$Path) {
    # WinTarget may still hold the VHDX for a moment after Remove-IscsiVirtualDisk: retry for a while, then leave it
    # (every LUN has a file name of its own, so a leftover blocks nothing).
    $deadline = (Get-Date).AddSeconds(60)
    while (Test-Path -LiteralPath $Path) {
        try {
            Remove-Item -LiteralPath $Path -Force -ErrorAction Stop
        } catch {
            if ((Get-Date) -gt $deadline) {
                Write-Host "::warning::$Path is still in use 60 s after Remove-IscsiVirtualDisk: left in place ($_)"
                return
            }
            Start-Sleep -Milliseconds 500
        }
    }
}

function New-ScratchLun {
    $target = Get-IscsiServerTarget -TargetName $TargetName -ErrorAction SilentlyContinue
    if (-not $target) {
        $target = New-IscsiServerTarget -TargetName $TargetName -InitiatorIds @('Iqn:*')
        Write-Host "created target $($target.TargetIqn)"
    }
    $iqn = $target.TargetIqn.ToString()
    # A session a failed run left behind would keep the LUN mapped: log it out (persistent logins too).
    foreach ($session in @(Get-IscsiSession -ErrorAction SilentlyContinue | Where-Object { $_.TargetNodeAddress -eq $iqn })) {
        Write-Host "logging out a leftover session $($session.SessionIdentifier)"
        if ($session.IsPersistent) { Unregister-IscsiSession -SessionIdentifier $session.SessionIdentifier | Out-Null }
    }
    foreach ($t in @(Get-IscsiTarget -ErrorAction SilentlyContinue | Where-Object { $_.NodeAddress -eq $iqn -and $_.IsConnected })) {
        Disconnect-IscsiTarget -NodeAddress $t.NodeAddress -Confirm:$false | Out-Null
    }
    foreach ($lun in @($target.LunMappings)) {
        Remove-IscsiVirtualDiskTargetMapping -TargetName $TargetName -Path $lun.Path | Out-Null
        Remove-IscsiVirtualDisk -Path $lun.Path | Out-Null
        Remove-LunFile $lun.Path
        Write-Host "removed the previous LUN $($lun.Path)"
    }
    New-Item -ItemType Directory -Force -Path 'C:\wincsi-check\iscsi' | Out-Null
    $vhd = "C:\wincsi-check\iscsi\lun-$([DateTime]::UtcNow.Ticks).vhdx"
    New-IscsiVirtualDisk -Path $vhd -SizeBytes 1GB | Out-Null
    Add-IscsiVirtualDiskTargetMapping -TargetName $TargetName -Path $vhd -Lun 0 | Out-Null
    Write-Host "fresh scratch LUN 0: $vhd"
    $iqn
}

if ($RemoveCsiProxy) { Remove-CsiProxyService }

if ($AssertNoCsiProxy) {
    # @(): a function's single result is a scalar, and Windows PowerShell's strict mode has no .Count on a scalar.
    $left = @(Get-CsiProxyPipes)
    if ($left.Count -gt 0) { throw "csi-proxy pipes exist on this host: $($left -join ', ')" }
    Write-Host 'no csi-proxy pipe on this host'
}

if ($CsiProxySource) {
    Remove-CsiProxyService
    $bin = 'C:\etc\kubernetes\node\bin'
    $logs = 'C:\etc\kubernetes\logs'
    New-Item -ItemType Directory -Force -Path $bin, $logs, 'C:\var\lib\kubelet' | Out-Null
    Push-Location $CsiProxySource
    try {
        $env:GOOS = 'windows'; $env:GOARCH = 'amd64'
        Invoke-Native 'go build ./cmd/csi-proxy' { go build -o "$bin\csi-proxy.exe" ./cmd/csi-proxy }
        Invoke-Native 'git describe' { git describe --tags --always }
    } finally { Pop-Location }
    # The flags of csi-proxy's README and CI: a Windows service logging to a file, restarted by the service manager.
    $flags = "-windows-service -v=4 -log_file=$logs\csi-proxy.log -logtostderr=false -kubelet-path C:\var\lib\kubelet"
    Invoke-Native 'sc.exe create csiproxy' { sc.exe create csiproxy start= auto binPath= "$bin\csi-proxy.exe $flags" }
    Invoke-Native 'sc.exe failure csiproxy' { sc.exe failure csiproxy reset= 0 actions= restart/10000 }
    Invoke-Native 'sc.exe start csiproxy' { sc.exe start csiproxy }
    $expected = $Pipes | ForEach-Object { "csi-proxy-$_" }
    Wait-Until { $have = @(Get-CsiProxyPipes); @($expected | Where-Object { $have -notcontains $_ }).Count -eq 0 } 120 "the pipes $($expected -join ', ')"
    Get-CsiProxyPipes | ForEach-Object { Write-Host "pipe \\.\pipe\$_" }
}

if ($Smb) {
    $user = 'wincsi-check'
    $bytes = New-Object byte[] 18
    [Security.Cryptography.RandomNumberGenerator]::Create().GetBytes($bytes)
    $password = 'Wc1!' + [Convert]::ToBase64String($bytes).Replace('/', 'x').Replace('+', 'y')
    $secure = ConvertTo-SecureString -String $password -AsPlainText -Force
    if (Get-LocalUser -Name $user -ErrorAction SilentlyContinue) {
        Set-LocalUser -Name $user -Password $secure
    } else {
        New-LocalUser -Name $user -Password $secure -PasswordNeverExpires -AccountNeverExpires | Out-Null
    }
    New-Item -ItemType Directory -Force -Path 'C:\wincsi-check\share\check' | Out-Null
    if (-not (Get-SmbShare -Name 'wincsi-check' -ErrorAction SilentlyContinue)) {
        New-SmbShare -Name 'wincsi-check' -Path 'C:\wincsi-check\share' -FullAccess "$env:COMPUTERNAME\$user" | Out-Null
    }
    $acl = Get-Acl 'C:\wincsi-check\share'
    $rule = New-Object Security.AccessControl.FileSystemAccessRule("$env:COMPUTERNAME\$user", 'FullControl', 'ContainerInherit,ObjectInherit', 'None', 'Allow')
    $acl.AddAccessRule($rule)
    Set-Acl 'C:\wincsi-check\share' $acl
    Set-Output WINCSI_CHECK_SMB_SHARE "\\$env:COMPUTERNAME\wincsi-check\check"
    Set-Output WINCSI_CHECK_SMB_USERNAME "$env:COMPUTERNAME\$user"
    Set-Output WINCSI_CHECK_SMB_PASSWORD $password -Secret
}

if ($Iscsi) {
    $portal = Get-PortalAddress
    Install-IscsiTarget
    $iqn = New-ScratchLun
    Set-Output WINCSI_CHECK_ISCSI_PORTAL "${portal}:3260"
    Set-Output WINCSI_CHECK_ISCSI_IQN $iqn
    Set-Output WINCSI_CHECK_ISCSI_LUN '0'

    # A target created after the node added the portal (issue 28 item 4, real-node check 25): the portal first (the
    # NIC address, as above), then a target with a name never used before, so no earlier discovery can have listed it.
    foreach ($old in @(Get-IscsiServerTarget | Where-Object { $_.TargetName -like 'wincsi-check-late-*' })) {
        foreach ($lun in @($old.LunMappings)) {
            Remove-IscsiVirtualDiskTargetMapping -TargetName $old.TargetName -Path $lun.Path | Out-Null
            Remove-IscsiVirtualDisk -Path $lun.Path | Out-Null
            Remove-LunFile $lun.Path
        }
        Remove-IscsiServerTarget -TargetName $old.TargetName | Out-Null
    }
    if (-not (Get-IscsiTargetPortal -ErrorAction SilentlyContinue | Where-Object { $_.TargetPortalAddress -eq $portal })) {
        New-IscsiTargetPortal -TargetPortalAddress $portal -TargetPortalPortNumber 3260 | Out-Null
    }
    $late = "wincsi-check-late-$([DateTime]::UtcNow.Ticks)"
    $lateTarget = New-IscsiServerTarget -TargetName $late -InitiatorIds @('Iqn:*')
    $lateVhd = "C:\wincsi-check\iscsi\$late.vhdx"
    New-IscsiVirtualDisk -Path $lateVhd -SizeBytes 64MB | Out-Null
    Add-IscsiVirtualDiskTargetMapping -TargetName $late -Path $lateVhd -Lun 0 | Out-Null
    Set-Output WINCSI_CHECK_ISCSI_LATE_IQN $lateTarget.TargetIqn.ToString()
}
exit 0
