<#
.SYNOPSIS
  The host's state after a failed real-node proof (.github/workflows/windows-real-node.yml runs it on failure): SMB
  global mappings and shares, iSCSI portals, targets, sessions, connections and disks, the target server's targets
  and virtual disks, the csiproxy service and pipes, the driver containers, and the iSCSI / SMB client event logs.

.DESCRIPTION
  -Out DIR   also write each section to DIR\<section>.txt (uploaded with the results).
  Runs under Windows PowerShell 5.1 (the iSCSI Target cmdlets are Windows PowerShell modules). Every section is
  independent: one that fails (a module missing because the feature is not installed, a log that does not exist)
  says so and the others still run. It only reads.
#>
param([string]$Out)
$ErrorActionPreference = 'Continue'
$ProgressPreference = 'SilentlyContinue'
Set-StrictMode -Version Latest

if ($Out) { New-Item -ItemType Directory -Force -Path $Out | Out-Null }

function Show([string]$Name, [scriptblock]$Query) {
    $text = try {
        & $Query 2>&1 | Format-List * | Out-String -Width 250
    } catch {
        "($Name could not be read: $_)"
    }
    if (-not $text.Trim()) { $text = '(none)' }
    Write-Host "::group::$Name"
    Write-Host $text
    Write-Host '::endgroup::'
    if ($Out) { Set-Content -Path (Join-Path $Out "$Name.txt") -Value $text -Encoding UTF8 }
}

Show 'os' { Get-CimInstance Win32_OperatingSystem | Select-Object 'Caption', 'Version', 'BuildNumber', 'LastBootUpTime' }
Show 'smb-global-mappings' { Get-SmbGlobalMapping }
Show 'smb-mappings' { Get-SmbMapping }
Show 'smb-shares' { Get-SmbShare }
Show 'iscsi-target-portals' { Get-IscsiTargetPortal }
Show 'iscsi-targets' { Get-IscsiTarget }
Show 'iscsi-sessions' { Get-IscsiSession }
Show 'iscsi-connections' { Get-IscsiConnection }
Show 'disks' { Get-Disk }
Show 'iscsi-disks' { Get-Disk | Where-Object { $_.BusType -eq 'iSCSI' } | ForEach-Object { $_; Get-Partition -DiskNumber $_.Number -ErrorAction SilentlyContinue } }
Show 'volumes' { Get-Volume }
Show 'target-server-settings' { Get-IscsiTargetServerSetting }
Show 'target-server-targets' { Get-IscsiServerTarget }
Show 'target-server-virtual-disks' { Get-IscsiVirtualDisk }
Show 'csiproxy-service' { Get-Service -Name csiproxy -ErrorAction Stop | Select-Object 'Name', 'Status', 'StartType' }
Show 'csi-proxy-pipes' { [IO.Directory]::GetFiles('\\.\pipe\') | Where-Object { $_ -like '*csi-proxy*' } | ForEach-Object { [pscustomobject]@{ Pipe = $_ } } }
Show 'kubelet-tree' { Get-ChildItem -Recurse -Force -ErrorAction SilentlyContinue 'C:\var\lib\kubelet' | Select-Object 'FullName', 'LinkType', 'Target', 'Length' }
Show 'containers' {
    if (Get-Command docker -ErrorAction SilentlyContinue) {
        docker ps --all --no-trunc --format '{{.Names}} {{.Image}} {{.Status}}' | ForEach-Object { [pscustomobject]@{ Container = $_ } }
    }
}

# The client and target event logs (newest last), and the initiator's driver events in the System log.
$logs = @(Get-WinEvent -ListLog '*SmbClient*', '*SMBClient*', '*iSCSI*' -ErrorAction SilentlyContinue |
    Where-Object { $_.RecordCount -gt 0 } | Sort-Object -Property LogName -Unique)
foreach ($log in $logs) {
    $name = 'events-' + ($log.LogName -replace '[^A-Za-z0-9.-]', '_')
    Show $name { Get-WinEvent -LogName $log.LogName -MaxEvents 100 | Sort-Object TimeCreated | Select-Object 'TimeCreated', 'Id', 'LevelDisplayName', 'Message' }
}
Show 'events-System-iSCSI' {
    Get-WinEvent -FilterHashtable @{ LogName = 'System'; ProviderName = @('iScsiPrt', 'MSiSCSI', 'Service Control Manager') } -MaxEvents 100 |
        Sort-Object TimeCreated | Select-Object 'TimeCreated', 'ProviderName', 'Id', 'LevelDisplayName', 'Message'
}
exit 0
