/* The CPU's float32 FMA peak: each thread runs 12 independent chains of 8-wide AVX2 fused
 * multiply-adds (enough to cover the FMA units' latency), with no memory traffic, and the program
 * prints GFLOP/s per thread. A matmul kernel cannot beat this rate; bench_gemm.py --peak compiles
 * and runs it to put the matmul peers' GFLOP/s against it.
 *
 *   cc -O3 -mavx2 -mfma -pthread bench/fma_peak.c -o fma_peak && ./fma_peak 2 100000000
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long iterations;

#define CHAIN(i) a##i = _mm256_fmadd_ps(a##i, b, c)

static void *chains(void *out) {
  __m256 b = _mm256_set1_ps(1.0000001f), c = _mm256_set1_ps(1e-7f);
  __m256 a0 = _mm256_set1_ps(0), a1 = _mm256_set1_ps(1), a2 = _mm256_set1_ps(2);
  __m256 a3 = _mm256_set1_ps(3), a4 = _mm256_set1_ps(4), a5 = _mm256_set1_ps(5);
  __m256 a6 = _mm256_set1_ps(6), a7 = _mm256_set1_ps(7), a8 = _mm256_set1_ps(8);
  __m256 a9 = _mm256_set1_ps(9), a10 = _mm256_set1_ps(10), a11 = _mm256_set1_ps(11);
  for (long n = 0; n < iterations; n++) {
    CHAIN(0); CHAIN(1); CHAIN(2); CHAIN(3); CHAIN(4); CHAIN(5);
    CHAIN(6); CHAIN(7); CHAIN(8); CHAIN(9); CHAIN(10); CHAIN(11);
  }
  __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  sum = _mm256_add_ps(sum, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
  *(float *)out = _mm256_cvtss_f32(sum);  /* used, so the loop is not optimized away */
  return NULL;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  iterations = argc > 2 ? atol(argv[2]) : 100000000L;
  if (threads < 1 || threads > 256 || iterations < 1) {
    fprintf(stderr, "usage: fma_peak THREADS ITERATIONS\n");
    return 2;
  }
  pthread_t *ids = malloc(sizeof(pthread_t) * threads);
  float *sums = malloc(sizeof(float) * threads);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < threads; i++) pthread_create(&ids[i], NULL, chains, &sums[i]);
  for (int i = 0; i < threads; i++) pthread_join(ids[i], NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double seconds = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
  double flop_per_thread = (double)iterations * 12 * 8 * 2;
  printf("%.2f\n", flop_per_thread / seconds / 1e9);  /* GFLOP/s per thread */
  fprintf(stderr, "threads %d, %.3f s, checksum %g\n", threads, seconds, (double)sums[0]);
  free(ids);
  free(sums);
  return 0;
}
