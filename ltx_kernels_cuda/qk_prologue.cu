// Fused q/k RMSNorm + interleaved RoPE on CUDA (the LTX-Video attention prologue; see
// rmsnorm_rope_qk_launch in torch_binding.h).
//
// rmsnorm.cu's pattern for two rows at once: one group of `tpr` threads (a power of two) per token
// handles that token's q row and k row. Each thread keeps up to kCached vectors of each row in
// registers, so q and k are read once (longer rows re-read their tail); both sums of squares are
// reduced with row_sum, then for every vector the thread loads the cos/sin elements once and
// applies them to q and to k (tables of one value per channel or per pair: common/rope_tables.cuh).
// With tables, tokens are visited position-major (s outer, b inner) so that a stride-0 batch of
// tables is served from L1/L2 for the second batch entry. The normalised value is rounded to x's
// dtype before the rotation (eager's op boundary); the rotation uses __fmul_rn/__fsub_rn/__fadd_rn
// (never fused to FMA) and rounds once.
#include <algorithm>
#include <type_traits>

#include "../torch-ext/torch_binding.h"
#include "common/dispatch.cuh"
#include "common/reduce.cuh"
#include "common/rope_tables.cuh"
#include "common/row_order.cuh"
#include "common/vec.cuh"

namespace ltx::cuda {
namespace {

constexpr int kCached = 4;           // vectors per thread and tensor held in registers
constexpr int kTargetPerThread = 4;  // vectors per thread the launch aims for
constexpr int kEarlyPerThread = 2;   // the same for the early-table form (kEarly)
constexpr int kBlock = 256;          // threads per block when rows are short
constexpr int kMaxBlock = 512;       // as rmsnorm.cu: no __launch_bounds__, no spills

struct QkParams {
  const void* x[2];  // q, k rows
  void* out[2];
  const void* w[2];  // nullptr: no weight
  int64_t rows[2];
  int64_t x_stride[2];
  int64_t out_stride[2];
  int64_t tokens;  // max(rows)
  const float* cos;  // nullptr: norm only
  const float* sin;
  int64_t cos_b, cos_s, sin_b, sin_s;
  int64_t seq, batch;
  DivU32 by_batch;  // batch >= 2 and tokens <= INT32_MAX: i / batch by a multiply
  int cols;
  int tpr;
  float eps;
};

// N consecutive elements; kVec: one aligned vector access, else N scalar accesses.
template <typename T, int N, bool kVec>
__device__ __forceinline__ Vec<T, N> load_n(const T* p) {
  if constexpr (kVec) {
    return Vec<T, N>::load(p);
  } else {
    Vec<T, N> v;
#pragma unroll
    for (int k = 0; k < N; ++k) v.v[k] = p[k];
    return v;
  }
}

template <typename T, int N, bool kVec>
__device__ __forceinline__ void store_n(const Vec<T, N>& v, T* p) {
  if constexpr (kVec) {
    v.store(p);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) p[k] = v.v[k];
  }
}

template <typename T, int N>
__device__ __forceinline__ float sum_sq(const Vec<T, N>& v) {
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const float f = to_float(v.v[k]);
    s += f * f;
  }
  return s;
}

// round_x(x * inv * w) for one vector, as fp32 values.
template <typename T, typename Tw, int N, bool kVec>
__device__ __forceinline__ void normalise(const Vec<T, N>& v, const Tw* w, int j, float inv,
                                          float* n) {
  if (w != nullptr) {
    const Vec<Tw, N> wv = load_n<Tw, N, kVec>(w + j * N);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      n[k] = to_float(from_float<T>(__fmul_rn(to_float(v.v[k]) * inv, to_float(wv.v[k]))));
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) n[k] = to_float(from_float<T>(to_float(v.v[k]) * inv));
  }
}

template <typename T, int N, bool kVec>
__device__ __forceinline__ void store_plain(const float* n, T* o) {
  Vec<T, N> r;
#pragma unroll
  for (int k = 0; k < N; ++k) r.v[k] = from_float<T>(n[k]);
  store_n<T, N, kVec>(r, o);
}

template <typename T, int N, bool kVec>
__device__ __forceinline__ void store_rotated(const float* n, const float* c, const float* s,
                                              T* o) {
  Vec<T, N> r;
#pragma unroll
  for (int k = 0; k < N; k += 2) {
    r.v[k] = from_float<T>(__fsub_rn(__fmul_rn(n[k], c[k]), __fmul_rn(n[k + 1], s[k])));
    r.v[k + 1] =
        from_float<T>(__fadd_rn(__fmul_rn(n[k + 1], c[k + 1]), __fmul_rn(n[k], s[k + 1])));
  }
  store_n<T, N, kVec>(r, o);
}

// Asks for the 128-byte line holding `ptr` to be brought into L2 (a hint: no register or
// shared memory waits for it, nothing faults).
__device__ __forceinline__ void prefetch_l2(const void* ptr) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(ptr));
}

// kTab: how the tables are read when there are any (common/rope_tables.cuh).
// kPrefetch (calls with tables the batch shares; see the launcher): as soon as q's and
// k's loads are issued, the row group's lanes ask for the token's cos / sin rows in L2, a share
// of their 128-byte lines each, so the table loads after the reduction are L2 hits instead of
// a second DRAM round trip. The H200 medians (2026-12-06 02:54) had the prologue at 83% of
// copy (H100 95%): its tables are half the bytes it reads.
// (Full tables queued into shared memory by cp.async with q's and k's loads, so their round
// trip would not follow the reduction, lost on the H100 by 3-19% and was never timed on an
// H200: removed 2026-12-07, benchmarks/NOTES.md 2026-12-06.)
// kC: vectors per thread and row held in registers (kCached; the early form 2).
// kEarly (candidate, LTX_KERNELS_QK_TABLES=early; 8-wide calls with tables): the cached
// vectors' table values loaded into registers with q's and k's loads, before the reduction,
// at 2 vectors per thread (twice the threads per token) so that they fit: one DRAM round
// trip per token instead of two. Why: the H200 runs the prologue at 85% of a same-bytes copy
// (H100 96%; RESULTS.md 2026-12-07 18:19): every token waits for its tables (2/3 of its
// bytes) after its reduction. sm_90 bf16 at first 118-123 registers (the plain form 126-128),
// so 2 blocks of 256 threads per SM either way: 4 tokens of 24 KB in flight instead of 8 of
// 8 KB (their tables after the reduction). Predict H200 [2, 8064, 2048] 149 -> <= 135 µs.
// Since q's and k's cached vectors are zeroed before their loads (Vec::set_zero, below), the
// sm_90 bf16 full-table forms take 80 registers, plain and early alike (3 blocks of 256 per
// SM; 12 tokens of 8 KB in flight in the plain form), pair tables 92-96 (still 2). H100 bf16,
// 2026-12-07 22:07 (RESULTS.md, medians of 3), against LTX_KERNELS_BLOCKS_PER_SM=2 (the old
// occupancy, common/row_order.cuh): [B, S, D] tables 182.08 -> 172.90 µs, pair 125.86 ->
// 122.08, shared full 145.78 -> 145.18; the early form at 80 registers: pair 113.34, shared full
// 138.37, [B, S, D] 173.47 (a default for shared tables if the H200 agrees).
template <typename T, typename Tw, int N, bool kVec, int kTab, bool kPrefetch, int kC = kCached,
          bool kEarly = false>
__device__ __forceinline__ void qk_rows(const QkParams& p) {
  static_assert(!kEarly || (N >= 2 && !kPrefetch), "the early form: vector calls with tables");
  __shared__ float scratch_mem[kRowScratchFloats];
  RowScratch scratch{scratch_mem};
  using V = Vec<T, N>;
  const int nvec = p.cols / N;
  const RowGroup rg = row_group_pow2(p.tpr);
  const int lane = rg.lane;
  const int groups = rg.groups;
  const float inv_cols = 1.0f / static_cast<float>(p.cols);
  const bool rope = p.cos != nullptr;

  for (int64_t base = static_cast<int64_t>(blockIdx.x) * groups; base < p.tokens;
       base += static_cast<int64_t>(gridDim.x) * groups) {
    const int64_t i = base + rg.group;
    // Position-major with tables: token i is (s = i / batch, b = i % batch). Unlike RoPE's
    // tokens, the prologue's rows lose batch-major (H100, 2026-12-06: LTX's [2, 8064, 2048]
    // 140.8 -> 153.4 µs with a stride-0 pair of tables, 155.6 -> 181.8 µs with full tables).
    // The row's address waits on this division before q's and k's loads can issue, so it is
    // one multiply (by_batch) where it can be, never a 64-bit divide routine; (b, s) serve the
    // tables too (no second division by seq).
    int64_t b = 0, s = i;
    if (rope && p.batch > 1) {
      if (p.by_batch.magic != 0) {
        const uint32_t q = p.by_batch.div(static_cast<uint32_t>(i));
        s = q;
        b = i - static_cast<int64_t>(q) * p.batch;
      } else {
        b = i % p.batch;
        s = i / p.batch;
      }
    }
    const int64_t row = rope ? b * p.seq + s : i;
    const T* xr[2];
    T* orow[2];
    bool live[2];
    // Zeroed first (Vec::set_zero): sm_90 bf16 8-wide 126-128 -> 80 registers (3 blocks of 256
    // per SM instead of 2), fp16 92 -> 80, the early-table form 118-123 -> 80-96.
    V cache[2][kC];
#pragma unroll
    for (int t = 0; t < 2; ++t) {
#pragma unroll
      for (int c = 0; c < kC; ++c) cache[t][c].set_zero();
    }
    float ss[2] = {0.f, 0.f};
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      live[t] = i < p.tokens && row < p.rows[t];
      xr[t] = static_cast<const T*>(p.x[t]) + (live[t] ? row : 0) * p.x_stride[t];
      orow[t] = static_cast<T*>(p.out[t]) + (live[t] ? row : 0) * p.out_stride[t];
#pragma unroll
      for (int c = 0; c < kC; ++c) {
        const int j = lane + c * p.tpr;
        if (live[t] && j < nvec) cache[t][c] = load_n<T, N, kVec>(xr[t] + j * N);
      }
    }
    // The table rows (both rows are live together with tables).
    auto table_row = [&](const float* base, int64_t b_stride, int64_t s_stride) {
      return base + b * b_stride + s * s_stride;
    };
    [[maybe_unused]] float tc[kEarly ? kC : 1][N], ts[kEarly ? kC : 1][N];
    if constexpr (kEarly) {
      if (rope && live[0]) {
        const float* cr = table_row(p.cos, p.cos_b, p.cos_s);
        const float* sr = table_row(p.sin, p.sin_b, p.sin_s);
#pragma unroll
        for (int c = 0; c < kC; ++c) {
          const int j = lane + c * p.tpr;
          if (j < nvec) {
            load_table<N, kVec, kTab>(cr, j, tc[c]);
            load_table<N, kVec, kTab>(sr, j, ts[c]);
          }
        }
      }
    }
    if constexpr (kPrefetch) {
      if (rope && i < p.tokens) {
        const char* rows[2] = {reinterpret_cast<const char*>(table_row(p.cos, p.cos_b, p.cos_s)),
                               reinterpret_cast<const char*>(table_row(p.sin, p.sin_b, p.sin_s))};
        const int row_bytes = p.cols * static_cast<int>(sizeof(float)) / (kTab == kPairTables ? 2 : 1);
#pragma unroll
        for (int t = 0; t < 2; ++t) {
          for (int off = lane * 128; off < row_bytes; off += p.tpr * 128) prefetch_l2(rows[t] + off);
          // A row that does not start on a line also ends in one more.
          if (lane == 0) prefetch_l2(rows[t] + row_bytes - 1);
        }
      }
    }
#pragma unroll
    for (int t = 0; t < 2; ++t) {
#pragma unroll
      for (int c = 0; c < kC; ++c) {
        const int j = lane + c * p.tpr;
        if (live[t] && j < nvec) ss[t] += sum_sq<T, N>(cache[t][c]);
      }
      for (int j = lane + kC * p.tpr; live[t] && j < nvec; j += p.tpr) {
        ss[t] += sum_sq<T, N>(load_n<T, N, kVec>(xr[t] + j * N));
      }
    }
    float inv[2];
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      inv[t] = rsqrtf(row_sum(ss[t], rg, scratch) * inv_cols + p.eps);
    }

    // The table rows, found after the reduction: they hold no registers across it.
    const float* crow = rope ? table_row(p.cos, p.cos_b, p.cos_s) : nullptr;
    const float* srow = rope ? table_row(p.sin, p.sin_b, p.sin_s) : nullptr;
    // One vector j of both rows: normalise, rotate with the table values read once (or
    // loaded early: pre, the cached vector c's tc / ts).
    auto finish = [&](int j, const V& vq, const V& vk, auto pre, int c) {
      [[maybe_unused]] constexpr bool kPre = decltype(pre)::value;  // (unused when N == 1)
      float n[2][N];
      if (live[0]) normalise<T, Tw, N, kVec>(vq, static_cast<const Tw*>(p.w[0]), j, inv[0], n[0]);
      if (live[1]) normalise<T, Tw, N, kVec>(vk, static_cast<const Tw*>(p.w[1]), j, inv[1], n[1]);
      if constexpr (N >= 2) {
        if (rope) {  // with tables, both rows are live together
          float cv[N], sv[N];
          if constexpr (kPre) {
#pragma unroll
            for (int k = 0; k < N; ++k) {
              cv[k] = tc[c][k];
              sv[k] = ts[c][k];
            }
          } else {
            load_table<N, kVec, kTab>(crow, j, cv);
            load_table<N, kVec, kTab>(srow, j, sv);
          }
          store_rotated<T, N, kVec>(n[0], cv, sv, orow[0] + j * N);
          store_rotated<T, N, kVec>(n[1], cv, sv, orow[1] + j * N);
          return;
        }
      }
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        if (live[t]) store_plain<T, N, kVec>(n[t], orow[t] + j * N);
      }
    };
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const int j = lane + c * p.tpr;
      if ((live[0] || live[1]) && j < nvec) finish(j, cache[0][c], cache[1][c], std::bool_constant<kEarly>{}, c);
    }
    for (int j = lane + kC * p.tpr; (live[0] || live[1]) && j < nvec; j += p.tpr) {
      const V vq = live[0] ? load_n<T, N, kVec>(xr[0] + j * N) : V{};
      const V vk = live[1] ? load_n<T, N, kVec>(xr[1] + j * N) : V{};
      finish(j, vq, vk, std::false_type{}, 0);
    }
  }
}

template <typename T, typename Tw, int N, bool kVec, int kTab, bool kPrefetch = false, int kC = kCached,
          bool kEarly = false>
__global__ void rmsnorm_rope_qk_kernel(QkParams p) {
  qk_rows<T, Tw, N, kVec, kTab, kPrefetch, kC, kEarly>(p);
}

}  // namespace
}  // namespace ltx::cuda

namespace ltx {

void rmsnorm_rope_qk_launch(const at::Tensor& q_out2d, const at::Tensor& q2d,
                            const at::Tensor& k_out2d, const at::Tensor& k2d,
                            const std::optional<at::Tensor>& q_weight,
                            const std::optional<at::Tensor>& k_weight, const at::Tensor& cos,
                            const at::Tensor& sin, int64_t seq, double eps) {
  using namespace ltx::cuda;
  const c10::cuda::CUDAGuard guard(q2d.device());
  const int device = q2d.device().index();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();

  QkParams p{};
  const at::Tensor* ins[2] = {&q2d, &k2d};
  const at::Tensor* outs[2] = {&q_out2d, &k_out2d};
  const std::optional<at::Tensor>* ws[2] = {&q_weight, &k_weight};
  for (int t = 0; t < 2; ++t) {
    p.x[t] = ins[t]->const_data_ptr();
    p.out[t] = outs[t]->mutable_data_ptr();
    p.w[t] = *ws[t] ? (*ws[t])->const_data_ptr() : nullptr;
    p.rows[t] = ins[t]->size(0);
    p.x_stride[t] = ins[t]->size(0) > 1 ? ins[t]->stride(0) : 0;
    p.out_stride[t] = outs[t]->size(0) > 1 ? outs[t]->stride(0) : 0;
  }
  p.tokens = std::max(p.rows[0], p.rows[1]);
  if (p.tokens == 0) return;
  TORCH_CHECK(q2d.size(1) <= INT32_MAX, "ltx_kernels.rmsnorm_rope_qk: last dim too large");
  p.cols = static_cast<int>(q2d.size(1));
  p.eps = static_cast<float>(eps);
  p.seq = std::max<int64_t>(seq, 1);
  p.batch = std::max<int64_t>(p.tokens / p.seq, 1);
  // Tokens are < 2^31 in every model we know of; beyond, the kernel divides in 64 bits.
  // LTX_KERNELS_QK_SPLIT=divide (an A/B switch) forces the 64-bit division (before 2026-12-06 22:00).
  if (p.batch > 1 && p.tokens <= INT32_MAX && ab_switch("LTX_KERNELS_QK_SPLIT") != "divide") {
    p.by_batch = DivU32(static_cast<uint32_t>(p.batch));
  }
  const bool rope = cos.defined();
  if (rope) {
    p.cos = cos.const_data_ptr<float>();
    p.sin = sin.const_data_ptr<float>();
    p.cos_b = cos.size(0) > 1 ? cos.stride(0) : 0;
    p.cos_s = cos.size(1) > 1 ? cos.stride(1) : 0;
    p.sin_b = sin.size(0) > 1 ? sin.stride(0) : 0;
    p.sin_s = sin.size(1) > 1 ? sin.stride(1) : 0;
  }

  const at::ScalarType x_dtype = q2d.scalar_type();
  const at::ScalarType w_dtype =
      q_weight ? q_weight->scalar_type() : (k_weight ? k_weight->scalar_type() : x_dtype);
  const int64_t xe = q2d.element_size();
  const int64_t we = at::elementSize(w_dtype);
  const void* w_any = p.w[0] ? p.w[0] : (p.w[1] ? p.w[1] : p.x[0]);
  // Vector width from q, k, outputs and weights; then the tables must allow it too.
  int vec = pick_vec_width(p.cols, {{p.x[0], xe, p.x_stride[0]},
                                    {p.x[1], xe, p.x_stride[1]},
                                    {p.out[0], xe, p.out_stride[0]},
                                    {p.out[1], xe, p.out_stride[1]},
                                    {w_any, we, 0},
                                    {p.w[1] ? p.w[1] : w_any, we, 0}});
  const int tables = table_kind(cos, p.cols);
  if (vec >= 4 && rope &&
      !tables_vectorizable(tables, vec, p.cos, p.sin, {p.cos_b, p.cos_s, p.sin_b, p.sin_s})) {
    vec = 2;
  }
  // Variants: 8 / 4 elements with vector accesses, 2 (even D) or 1 (odd D, norm only)
  // with scalar accesses.
  if (vec < 4) vec = p.cols % 2 == 0 ? 2 : 1;

  const int64_t nvec = p.cols / vec;
  // LTX_KERNELS_QK_TABLES (read per call: an A/B switch): prefetch / plain force either form;
  // early takes the candidate early-table form (kEarly) for 8-wide calls with tables.
  const std::string_view tables_switch = ab_switch("LTX_KERNELS_QK_TABLES");
  const bool early = rope && vec == 8 && tables_switch == "early";
  const int per_thread = early ? kEarlyPerThread : kTargetPerThread;
  const int tpr_wanted = std::min(kMaxBlock, pow2_ceil(ceil_div(nvec, per_thread)));
  auto launch_kernel = [&](auto kernel) {
    launch_rows_pow2(kernel, p, tpr_wanted, kBlock, p.tokens, device, stream);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  // The instantiation for this call's table kind (norm-only calls take the full one).
  auto launch = [&](auto full, auto pair) {
    return tables == kPairTables ? launch_kernel(pair) : launch_kernel(full);
  };
  // The kPrefetch form for 8-wide calls whose tables the batch shares (stride-0 batch, [S, D],
  // pair tables expanded over the batch): H100 bf16 [2, 8064, 2048], 2026-12-06 09:36
  // (RESULTS.md, clean cold L2, medians of 3): pair tables 139.20 -> 135.42 µs, full shared
  // tables 153.52 -> 148.48; but per-batch [B, S, D] tables (diffusers' LTX pipeline) 178.59 ->
  // 181.41, so those keep the plain form. One batch entry was not timed: plain.
  const bool shared_tables = p.batch > 1 && p.cos_b == 0 && p.sin_b == 0;
  const bool prefetch = rope && vec == 8 && tables_switch != "plain" &&
                        (tables_switch == "prefetch" || shared_tables);

  dispatch_float(x_dtype, [&](auto xt) {
    using T = typename decltype(xt)::type;
    dispatch_float(w_dtype, [&](auto wt) {
      using Tw = typename decltype(wt)::type;
      if constexpr (std::is_same_v<Tw, T> || std::is_same_v<Tw, float>) {
        constexpr size_t widest = std::max(sizeof(T), sizeof(Tw));
        switch (vec) {
          case 8:
            if constexpr (8 * widest <= 16) {
              if (early) {
                return launch(rmsnorm_rope_qk_kernel<T, Tw, 8, true, kFullTables, false, kEarlyPerThread, true>,
                              rmsnorm_rope_qk_kernel<T, Tw, 8, true, kPairTables, false, kEarlyPerThread, true>);
              }
              if (prefetch) {
                return launch(rmsnorm_rope_qk_kernel<T, Tw, 8, true, kFullTables, true>,
                              rmsnorm_rope_qk_kernel<T, Tw, 8, true, kPairTables, true>);
              }
              return launch(rmsnorm_rope_qk_kernel<T, Tw, 8, true, kFullTables>,
                            rmsnorm_rope_qk_kernel<T, Tw, 8, true, kPairTables>);
            }
            break;
          case 4:
            if constexpr (4 * widest <= 16) {
              return launch(rmsnorm_rope_qk_kernel<T, Tw, 4, true, kFullTables>,
                            rmsnorm_rope_qk_kernel<T, Tw, 4, true, kPairTables>);
            }
            break;
          case 2:
            return launch(rmsnorm_rope_qk_kernel<T, Tw, 2, false, kFullTables>,
                          rmsnorm_rope_qk_kernel<T, Tw, 2, false, kPairTables>);
          default:  // odd D: norm only
            return launch_kernel(rmsnorm_rope_qk_kernel<T, Tw, 1, false, kFullTables>);
        }
        TORCH_CHECK(false, "ltx_kernels.rmsnorm_rope_qk: internal error: vector width ", vec);
      } else {
        TORCH_CHECK(false, "ltx_kernels.rmsnorm_rope_qk: weights must be float32 or q's dtype");
      }
    });
  });
}

}  // namespace ltx
