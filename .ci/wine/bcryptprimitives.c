/*
 * Minimal bcryptprimitives.dll for Wine 8.
 *
 * Why: Rust >= 1.78 std imports ProcessPrng from bcryptprimitives.dll to seed
 * its hash maps and random state. Wine 8.0 (Debian 12) ships no such DLL, so
 * every Rust Windows executable dies at load time (STATUS_DLL_NOT_FOUND,
 * c0000135). This shim exports only ProcessPrng and forwards to RtlGenRandom
 * (advapi32!SystemFunction036), which Wine does implement.
 *
 * Test-infrastructure only: it is copied into the Wine prefix by
 * .ci/wine-setup.sh and never shipped.
 */
#include <windows.h>

/* advapi32!SystemFunction036, a.k.a. RtlGenRandom. Declared here rather than
 * through <ntsecapi.h> so the shim does not depend on that header's macros. */
BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

/* Fills data[0..len) with cryptographically random bytes. Like the real
 * ProcessPrng it always succeeds; RtlGenRandom takes a ULONG, so large
 * requests are split into chunks. */
__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len > 0) {
        ULONG chunk = len > 0x40000000u ? 0x40000000u : (ULONG)len;
        if (!SystemFunction036(data, chunk)) {
            return FALSE;
        }
        data += chunk;
        len -= chunk;
    }
    return TRUE;
}

BOOL WINAPI DllMain(HINSTANCE instance, DWORD reason, LPVOID reserved)
{
    (void)instance;
    (void)reason;
    (void)reserved;
    return TRUE;
}
