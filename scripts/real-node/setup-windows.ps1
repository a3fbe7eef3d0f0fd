<#
.SYNOPSIS
  Windows-only setup for the real-node workflow (.github/workflows/windows-real-node.yml): csi-proxy built from
  source and run as a service, a local SMB share with its own account, and (where the image has the iSCSI Target
  Server feature) a local iSCSI target with a fresh scratch LUN. Everything it creates is named wincsi-check*.

.DESCRIPTION
  -CsiProxySource DIR  build DIR (a checkout of kubernetes-csi/csi-proxy at a tag; Go on PATH) into
                       C:\etc\kubernetes\node\bin\csi-proxy.exe and (re)install the csiproxy service with
                       -kubelet-path C:\var\lib\kubelet; waits (bounded) for its named pipes.
  -Smb                 create the local account wincsi-check (random password) and the share
                       \\<computer>\wincsi-check (folder C:\wincsi-check\share, subfolder check).
  -Iscsi               install FS-iSCSITarget-Server if missing, start MSiSCSI, create target wincsi-check for this
                       node's initiator with a fresh 1 GiB scratch LUN 0 (the previous one is removed first); then
                       add the portal 127.0.0.1 on the initiator and create a target wincsi-check-late-<ticks>
                       (64 MiB LUN 0) after it, for check-node's discovery check (--iscsi-late-iqn).
  -RemoveCsiProxy      stop and delete the csiproxy service.
  Outputs go to $env:GITHUB_ENV when set (WINCSI_CHECK_SMB_SHARE, WINCSI_CHECK_SMB_USERNAME, WINCSI_CHECK_SMB_PASSWORD
  (masked), WINCSI_CHECK_ISCSI_PORTAL, WINCSI_CHECK_ISCSI_IQN, WINCSI_CHECK_ISCSI_LUN,
  WINCSI_CHECK_ISCSI_LATE_IQN), else to the console.
#>
param(
    [string]$CsiProxySource,
    [switch]$Smb,
    [switch]$Iscsi,
    [switch]$RemoveCsiProxy
)
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest

function Set-Output([string]$Name, [string]$Value, [switch]$Secret) {
    if ($Secret) { Write-Output "::add-mask::$Value" }
    if ($env:GITHUB_ENV) {
        Add-Content -Path $env:GITHUB_ENV -Value "$Name=$Value" -Encoding utf8
    } elseif (-not $Secret) {
        Write-Output "$Name=$Value"
    }
    Set-Item -Path "env:$Name" -Value $Value
}

function Wait-Until([scriptblock]$Condition, [int]$Seconds, [string]$What) {
    # Waiting for an external service to come up (not test synchronisation): bounded.
    $deadline = (Get-Date).AddSeconds($Seconds)
    while (-not (& $Condition)) {
        if ((Get-Date) -gt $deadline) { throw "timed out after ${Seconds}s waiting for $What" }
        Start-Sleep -Milliseconds 500
    }
}

function Remove-CsiProxyService {
    if (Get-Service -Name csiproxy -ErrorAction SilentlyContinue) {
        Stop-Service -Name csiproxy -Force -ErrorAction SilentlyContinue
        sc.exe delete csiproxy | Out-Null
        Wait-Until { -not (Test-Path '\\.\pipe\csi-proxy-filesystem-v1') } 60 'the csi-proxy pipes to go'
    }
}

if ($RemoveCsiProxy) { Remove-CsiProxyService }

if ($CsiProxySource) {
    Remove-CsiProxyService
    $bin = 'C:\etc\kubernetes\node\bin'
    $logs = 'C:\etc\kubernetes\logs'
    New-Item -ItemType Directory -Force -Path $bin, $logs, 'C:\var\lib\kubelet' | Out-Null
    Push-Location $CsiProxySource
    try {
        $env:GOOS = 'windows'; $env:GOARCH = 'amd64'
        go build -o "$bin\csi-proxy.exe" ./cmd/csi-proxy
        if ($LASTEXITCODE -ne 0) { throw "go build of csi-proxy failed ($LASTEXITCODE)" }
        $ref = (git describe --tags --always 2>$null)
    } finally { Pop-Location }
    Write-Output "built csi-proxy $ref"
    # The flags of csi-proxy's own README and CI: a Windows service logging to a file.
    $flags = "-windows-service -v=4 -log_file=$logs\csi-proxy.log -logtostderr=false -kubelet-path C:\var\lib\kubelet"
    sc.exe create csiproxy start= auto binPath= "$bin\csi-proxy.exe $flags" | Out-Null
    sc.exe start csiproxy | Out-Null
    Wait-Until { Test-Path '\\.\pipe\csi-proxy-filesystem-v1' } 120 'the csi-proxy pipes'
    Get-ChildItem '\\.\pipe\' | Where-Object Name -like 'csi-proxy-*' | ForEach-Object { Write-Output "pipe $($_.Name)" }
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
    $feature = Get-WindowsFeature -Name FS-iSCSITarget-Server -ErrorAction SilentlyContinue
    if (-not $feature) {
        Write-Output '::notice::this image has no iSCSI Target Server feature: the iSCSI checks are skipped'
        Set-Output WINCSI_CHECK_ISCSI_PORTAL ''
        return
    }
    if (-not $feature.Installed) {
        $r = Install-WindowsFeature -Name FS-iSCSITarget-Server
        if (-not $r.Success -or $r.RestartNeeded -eq 'Yes') {
            Write-Output "::notice::the iSCSI Target Server feature could not be installed without a restart: the iSCSI checks are skipped"
            Set-Output WINCSI_CHECK_ISCSI_PORTAL ''
            return
        }
    }
    Set-Service -Name MSiSCSI -StartupType Automatic
    Start-Service -Name MSiSCSI
    $initiator = (Get-InitiatorPort | Where-Object ConnectionType -eq 'iSCSI' | Select-Object -First 1).NodeAddress
    $target = Get-IscsiServerTarget -TargetName 'wincsi-check' -ErrorAction SilentlyContinue
    if ($target) {
        foreach ($lun in @($target.LunMappings)) {
            Remove-IscsiVirtualDiskTargetMapping -TargetName 'wincsi-check' -Path $lun.Path
            Remove-IscsiVirtualDisk -Path $lun.Path
            Remove-Item -Force $lun.Path
        }
    } else {
        $target = New-IscsiServerTarget -TargetName 'wincsi-check' -InitiatorIds "IQN:$initiator"
    }
    New-Item -ItemType Directory -Force -Path 'C:\wincsi-check\iscsi' | Out-Null
    $vhd = "C:\wincsi-check\iscsi\lun-$([DateTime]::UtcNow.Ticks).vhdx"
    New-IscsiVirtualDisk -Path $vhd -SizeBytes 1GB | Out-Null
    Add-IscsiVirtualDiskTargetMapping -TargetName 'wincsi-check' -Path $vhd -Lun 0
    Set-Output WINCSI_CHECK_ISCSI_PORTAL '127.0.0.1:3260'
    Set-Output WINCSI_CHECK_ISCSI_IQN ((Get-IscsiServerTarget -TargetName 'wincsi-check').TargetIqn.ToString())
    Set-Output WINCSI_CHECK_ISCSI_LUN '0'

    # A target created after the node added the portal (issue 28 item 4, real-node check 21): the portal first, then
    # a target with a name never used before, so no earlier discovery can have listed it.
    foreach ($old in @(Get-IscsiServerTarget | Where-Object TargetName -like 'wincsi-check-late-*')) {
        foreach ($lun in @($old.LunMappings)) {
            Remove-IscsiVirtualDiskTargetMapping -TargetName $old.TargetName -Path $lun.Path
            Remove-IscsiVirtualDisk -Path $lun.Path
            Remove-Item -Force $lun.Path
        }
        Remove-IscsiServerTarget -TargetName $old.TargetName
    }
    if (-not (Get-IscsiTargetPortal -TargetPortalAddress '127.0.0.1' -ErrorAction SilentlyContinue)) {
        New-IscsiTargetPortal -TargetPortalAddress '127.0.0.1' -TargetPortalPortNumber 3260 | Out-Null
    }
    $late = "wincsi-check-late-$([DateTime]::UtcNow.Ticks)"
    New-IscsiServerTarget -TargetName $late -InitiatorIds "IQN:$initiator" | Out-Null
    $lateVhd = "C:\wincsi-check\iscsi\$late.vhdx"
    New-IscsiVirtualDisk -Path $lateVhd -SizeBytes 64MB | Out-Null
    Add-IscsiVirtualDiskTargetMapping -TargetName $late -Path $lateVhd -Lun 0
    Set-Output WINCSI_CHECK_ISCSI_LATE_IQN ((Get-IscsiServerTarget -TargetName $late).TargetIqn.ToString())
}
