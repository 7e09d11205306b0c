/* An AVX2-only CPU as every library in a process sees it: loaded with LD_PRELOAD, it makes the CPUID instruction
 * fault (Linux's ARCH_SET_CPUID, where the processor supports CPUID faulting: /proc/cpuinfo's cpuid_fault) and
 * answers each CPUID itself, with the processor's answer less every AVX-512, AMX, AVX-VNNI and AVX10 bit. torch
 * (cpuinfo, MKL), oneDNN and OpenVINO (xbyak) and ONNX Runtime (MLAS) then dispatch to the kernels they run on
 * an AVX2-only CPU; the instructions still execute on this processor's cores. A test's tool, not a product:
 * tests/test_runtime.py builds it with `cc -O2 -shared -fPIC` to check which int8 kernel ONNX Runtime picks.
 *
 * The setting is per thread, kept across fork and clone (the constructor runs before the program starts its
 * threads) and dropped on execve (a child process preloads it again from LD_PRELOAD). The JVM takes SIGSEGV over
 * when it starts: preload its lib/libjsig.so before this library, so that it passes on the faults it does not
 * know (the runtime benchmarks that used this did; their script: `git show fd9db17:bench/runtime_rounds.py`).
 */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <cpuid.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

static int set_cpuid(int enabled) { return (int)syscall(SYS_arch_prctl, ARCH_SET_CPUID, enabled); }

/* leaf 7 subleaf 0: EBX AVX512F, DQ, IFMA, PF, ER, CD, BW, VL; ECX AVX512_VBMI, VBMI2, VNNI, BITALG, VPOPCNTDQ;
 * EDX AVX512_4VNNIW, 4FMAPS, VP2INTERSECT, AVX10, AMX_BF16, AVX512_FP16, AMX_TILE, AMX_INT8 */
#define L7_EBX ((1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) | (1u << 28) | (1u << 30) | (1u << 31))
#define L7_ECX ((1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14))
#define L7_EDX ((1u << 2) | (1u << 3) | (1u << 8) | (1u << 19) | (1u << 22) | (1u << 23) | (1u << 24) | (1u << 25))
/* leaf 7 subleaf 1: EAX AVX-VNNI, AVX512_BF16, AVX-IFMA; EDX AVX-VNNI-INT8, AVX-NE-CONVERT, AVX-VNNI-INT16 */
#define L71_EAX ((1u << 4) | (1u << 5) | (1u << 23))
#define L71_EDX ((1u << 4) | (1u << 5) | (1u << 10))

static void on_segv(int sig, siginfo_t *info, void *context) {
    ucontext_t *uc = context;
    greg_t *r = uc->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)r[REG_RIP];
    if (ip[0] != 0x0f || ip[1] != 0xa2) { /* not CPUID: a real fault, reported as the default would */
        signal(sig, SIG_DFL);
        return;
    }
    unsigned leaf = (unsigned)r[REG_RAX], sub = (unsigned)r[REG_RCX], a, b, c, d;
    set_cpuid(1);
    __cpuid_count(leaf, sub, a, b, c, d);
    set_cpuid(0);
    if (leaf == 7 && sub == 0) {
        b &= ~L7_EBX;
        c &= ~L7_ECX;
        d &= ~L7_EDX;
    } else if (leaf == 7 && sub == 1) {
        a &= ~L71_EAX;
        d &= ~L71_EDX;
    } else if (leaf == 0x1d || leaf == 0x1e || leaf == 0x24) { /* AMX tiles and TMUL, AVX10 */
        a = b = c = d = 0;
    }
    r[REG_RAX] = a;
    r[REG_RBX] = b;
    r[REG_RCX] = c;
    r[REG_RDX] = d;
    r[REG_RIP] += 2;
    (void)info;
}

__attribute__((constructor)) static void avx2_cpu(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_segv;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGSEGV, &action, NULL) != 0 || set_cpuid(0) != 0) {
        static const char message[] = "avx2_cpu: this processor or kernel has no CPUID faulting\n";
        (void)!write(2, message, sizeof message - 1);
        _exit(3);
    }
}
