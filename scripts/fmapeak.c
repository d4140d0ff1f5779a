// fmapeak: the F32 multiply-adds a core retires per second, from a loop of
// independent FMAs on registers (no memory), on THREADS threads at once.
// Prints GFLOP/s over all threads. Build: cc -O2 -march=native -pthread.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

#if defined(__AVX512F__)
typedef __m512 vec;
#define LANES 16
#define SET1 _mm512_set1_ps
#define FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define ADD _mm512_add_ps
#define SUM(v) _mm512_reduce_add_ps(v)
#elif defined(__FMA__)
typedef __m256 vec;
#define LANES 8
#define SET1 _mm256_set1_ps
#define FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define ADD _mm256_add_ps
static float SUM(__m256 v) { float f[8]; _mm256_storeu_ps(f, v); float s = 0; for (int i = 0; i < 8; i++) s += f[i]; return s; }
#elif defined(__aarch64__)
typedef float32x4_t vec;
#define LANES 4
#define SET1 vdupq_n_f32
#define FMA(a, b, c) vfmaq_f32(c, a, b)
#define ADD vaddq_f32
#define SUM vaddvq_f32
#else
#error "fmapeak needs x86 FMA (AVX2 or AVX-512) or arm64 NEON"
#endif

#define ACC 12 // accumulators: more than the FMA latency x ports, so the loop runs at the ports' rate
static long iters = 200000000 / ACC;
static volatile float sink;

static void * run(void * out) {
	const vec x = SET1(0.999999f), y = SET1(1e-7f);
	vec a0 = SET1(0), a1 = SET1(1), a2 = SET1(2), a3 = SET1(3), a4 = SET1(4), a5 = SET1(5);
	vec a6 = SET1(6), a7 = SET1(7), a8 = SET1(8), a9 = SET1(9), a10 = SET1(10), a11 = SET1(11);
	for (long n = 0; n < iters; n++) {
		a0 = FMA(a0, x, y); a1 = FMA(a1, x, y); a2 = FMA(a2, x, y); a3 = FMA(a3, x, y);
		a4 = FMA(a4, x, y); a5 = FMA(a5, x, y); a6 = FMA(a6, x, y); a7 = FMA(a7, x, y);
		a8 = FMA(a8, x, y); a9 = FMA(a9, x, y); a10 = FMA(a10, x, y); a11 = FMA(a11, x, y);
	}
	vec s = ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7)));
	s = ADD(s, ADD(ADD(a8, a9), ADD(a10, a11)));
	*(float *) out = SUM(s);
	return NULL;
}

int main(int argc, char ** argv) {
	int threads = argc > 1 ? atoi(argv[1]) : 1;
	pthread_t t[256];
	float out[256];
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, run, &out[i]);
	for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double s = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
	double flops = 2.0 * LANES * ACC * (double) iters * threads;
	sink = out[0]; // the sums are kept: the loops cannot be dropped
	printf("%.1f\n", flops / s / 1e9);
	return 0;
}
