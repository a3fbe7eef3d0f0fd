/*
 * Self-check for .ci/wine-setup.sh: imports ProcessPrng from bcryptprimitives.dll
 * exactly as Rust's std does and prints "ProcessPrng OK" if it fills a buffer.
 */
#include <windows.h>
#include <stdio.h>

__declspec(dllimport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len);

int main(void)
{
    BYTE buf[64] = {0};
    int nonzero = 0;

    if (!ProcessPrng(buf, sizeof buf)) {
        puts("ProcessPrng returned FALSE");
        return 1;
    }
    for (size_t i = 0; i < sizeof buf; i++) {
        nonzero |= buf[i] != 0;
    }
    if (!nonzero) {
        puts("ProcessPrng left the buffer zeroed");
        return 1;
    }
    puts("ProcessPrng OK");
    return 0;
}
