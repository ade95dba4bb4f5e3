// keel's limits, in one place (README "Limits"). Every size keel reads from a flag, from a
// checkpoint's stored run config or from its model_config is checked against these before it is used,
// and every size computed from them (shape products, batch x cores, bytes) goes through the
// overflow-checked arithmetic of core/shape.h. A value past a limit is a std::invalid_argument (exit
// status 2) whose message names the limit.
//
//   tensor elements       <= 2^58        one tensor (so its bytes, and sums of a few, fit in int64)
//   cores                 1 .. 4096      a device's cores (--cores; stored device.cores)
//   per-core batch        1 .. 2^20      --batch-per-core; stored batch_per_core; --max-batch searches up to it
//   classes               1 .. 2^24      --classes; stored classes
//   units, filters        1 .. 2^24      Dense units, Conv2D filters (model_config)
//   kernel sizes          1 .. 2^12      kernel_size, strides, dilation_rate, pool_size, padding (model_config)
//   input dims            1 .. 2^16      each dimension of --input-shape / stored input_shape (rank 1..4)
//   input elements        <= 2^28        per example (e.g. 16384x16384x1)
//   epochs                1 .. 10^6      --epochs; stored epochs (and a stored epoch 0 .. 10^6)
//   steps                 0 .. 2^48      stored step, batch_in_epoch, decay_steps; --save-every-steps,
//                                        --stop-after-steps
//   shuffle buffer        1 .. 2^31      --shuffle-buffer
//   checkpoints kept      0 .. 10^6      --keep
//   learning rate         finite, > 0    --lr (and momentum finite in [0, 1])
//   HBM per core          1 B .. 2^50 B  --hbm-per-core (or `unbounded`); 0 is only the `cpu` preset's
//   layers                <= 10^5        layers of a stored model_config
//   names                 <= 256 bytes   model, optimizer, loss, device and layer names read back
//   configs               <= 2^24 bytes  a stored model_config's JSON text (a ResNet152's is ~300 KB),
//                         nesting <= 32  ... nested at most this deep (a ResNet's: 8)
//
// Quoting: a message quotes at most kMaxQuotedBytes of any text it rejects (quote_untrusted).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace keel {

inline constexpr int64_t kMaxTensorElements = int64_t{1} << 58;
inline constexpr int64_t kMaxCores = 4096;
inline constexpr int64_t kMaxBatchPerCore = int64_t{1} << 20;
inline constexpr int64_t kMaxClasses = int64_t{1} << 24;
inline constexpr int64_t kMaxUnits = int64_t{1} << 24;
inline constexpr int64_t kMaxKernelSize = int64_t{1} << 12;
inline constexpr int64_t kMaxInputDim = int64_t{1} << 16;
inline constexpr int64_t kMaxInputRank = 4;
inline constexpr int64_t kMaxInputElements = int64_t{1} << 28;
inline constexpr int64_t kMaxEpochs = 1'000'000;
inline constexpr int64_t kMaxSteps = int64_t{1} << 48;
inline constexpr int64_t kMaxShuffleBuffer = int64_t{1} << 31;
inline constexpr int64_t kMaxKeep = 1'000'000;
inline constexpr int64_t kMaxHbmBytesPerCore = int64_t{1} << 50;
inline constexpr int64_t kMaxLayers = 100'000;
inline constexpr size_t kMaxNameBytes = 256;
inline constexpr size_t kMaxConfigBytes = size_t{1} << 24;
inline constexpr int kMaxJsonDepth = 32;
inline constexpr size_t kMaxQuotedBytes = 200;

// "2^24 (16777216)" for a power of two, else the number: how messages name a limit.
std::string limit_string(int64_t limit);

// `value` if lo <= value <= hi; else std::invalid_argument "<what> must be between <lo> and <hi>
// (keel's limit), got <value>".
int64_t check_in_range(std::string_view what, int64_t value, int64_t lo, int64_t hi);

// The input shape of one example: rank 1..kMaxInputRank, each dimension 1..kMaxInputDim, at most
// kMaxInputElements in all. `what` names its source ("--input-shape").
void check_input_shape(std::string_view what, const std::vector<int64_t>& shape);

// `text` for a message: at most `max_bytes` of it (then "... (N bytes)"), control bytes as \xNN, so
// that a hostile string can neither flood nor garble the terminal.
std::string quote_untrusted(std::string_view text, size_t max_bytes = kMaxQuotedBytes);

}  // namespace keel
