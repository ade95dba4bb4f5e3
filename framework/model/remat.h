// Rematerialisation of a model's training forward pass (Keras's RematScope; DESIGN.md 2b), chosen
// per model (Model::set_remat, `keel train|memory --remat`):
//   none              every op saves what its backward needs (the default)
//   segments          checkpoints at the graph's articulation points — each residual block's output,
//                     each layer of a Sequential: every segment saves only its input, and backward
//                     recomputes it (framework/autodiff/recompute.h), as
//                     torch.utils.checkpoint_sequential.
//   full              Keras's mode="full": every single-input layer's call is rematerialised (keeps
//                     its input, recomputes its ops in backward).
//   larger_than:BYTES Keras's mode="larger_than": the layers whose output (per replica, in its compute
//                     dtype) is larger than BYTES.
//   layers:REGEX      Keras's mode="list_of_layers", with a regular expression (ECMAScript, matched
//                     against the whole layer name) for the list.
// The head (the layer or segment that produces the model's output) always runs plainly, so the loss
// reads the output (and a softmax's logits) as it does without remat; multi-input layers (Add,
// Concatenate) too. Gradients are bit-identical in every mode.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace keel {

class Remat {
 public:
  enum class Mode { none, segments, full, larger_than, layers };

  constexpr Remat() = default;
  constexpr explicit Remat(Mode mode) : mode_(mode) {}
  static const Remat none;
  static const Remat segments;
  static const Remat full;
  static Remat larger_than(int64_t bytes);    // bytes >= 0
  static Remat layers(std::string pattern);   // a valid ECMAScript regex, else std::invalid_argument

  Mode mode() const { return mode_; }
  int64_t threshold_bytes() const { return bytes_; }
  const std::string& pattern() const;
  bool operator==(const Remat& other) const {
    return mode_ == other.mode_ && bytes_ == other.bytes_ && pattern() == other.pattern();
  }

  // For full, larger_than and layers: whether a layer named `layer` whose output takes `output_bytes`
  // is rematerialised on its own.
  bool remats_layer(const std::string& layer, int64_t output_bytes) const;

 private:
  Mode mode_ = Mode::none;
  int64_t bytes_ = 0;
  // Held by pointer so that the constants below are constant-initialized (no std::string in a
  // constexpr object), whatever the order in which other files' globals are initialized.
  std::shared_ptr<const std::string> pattern_;
};

inline constinit const Remat Remat::none{Remat::Mode::none};
inline constinit const Remat Remat::segments{Remat::Mode::segments};
inline constinit const Remat Remat::full{Remat::Mode::full};

// "none", "segments", "full", "larger_than:1048576", "layers:conv.*" (what parse_remat reads).
std::string remat_name(const Remat& remat);
// The flag's value: one of the above (BYTES also as 4MiB, 1.5GB, ...); std::invalid_argument naming
// what works otherwise.
Remat parse_remat(const std::string& text);

}  // namespace keel
