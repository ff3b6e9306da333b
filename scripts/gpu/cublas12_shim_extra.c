/* Built into the same libcublas.so.12 stand-in as cublas12_shim.c (scripts/gpu/bundle.py): the two cuBLAS calls
   that lmdeploy 0.17 TurboMind imports beyond 0.18's six (nm -D --undefined-only lmdeploy/lib/_turbomind*.so).
   Both libraries are loaded with RTLD_NOW, so every imported name must exist even if never called.
   cublasSetMathMode: called when TurboMind's cuBLAS GEMM kernel is made (src/turbomind/kernels/gemm/cublas.cu).
   cublasGemmGroupedBatchedEx: its grouped (MoE) cuBLAS path only. Signatures as in CUDA 12.5+ cublas_api.h. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
static void *llmc_cublas_sym(const char *n) {
  static void *h;
  if (!h) { h = dlopen("libcublas.so.13", RTLD_NOW | RTLD_GLOBAL);
    if (!h) { fprintf(stderr, "cublas shim: %s\n", dlerror()); abort(); } }
  void *p = dlsym(h, n);
  if (!p) { fprintf(stderr, "cublas shim: missing %s\n", n); abort(); }
  return p;
}
typedef int st;
st cublasSetMathMode(void *a, int m) { return ((st(*)(void *, int))llmc_cublas_sym("cublasSetMathMode"))(a, m); }
typedef st (*grouped_t)(void *, const int *, const int *, const int *, const int *, const int *, const void *,
                        const void *const *, int, const int *, const void *const *, int, const int *, const void *,
                        void *const *, int, const int *, int, const int *, int);
st cublasGemmGroupedBatchedEx(void *h, const int *ta, const int *tb, const int *m, const int *n, const int *k,
                              const void *alpha, const void *const *A, int At, const int *lda, const void *const *B,
                              int Bt, const int *ldb, const void *beta, void *const *C, int Ct, const int *ldc,
                              int groups, const int *group_size, int compute) {
  return ((grouped_t)llmc_cublas_sym("cublasGemmGroupedBatchedEx"))(h, ta, tb, m, n, k, alpha, A, At, lda, B, Bt, ldb,
                                                                    beta, C, Ct, ldc, groups, group_size, compute);
}
