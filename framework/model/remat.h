// Rematerialisation of a model's training forward pass (Keras's RematScope; DESIGN.md 2b), chosen
// per model (Model::set_remat, `keel train|memory --remat`):
//   none      every op saves what its backward needs (the default)
//   segments  checkpoints at the graph's articulation points — each residual block's output, each
//             layer of a Sequential: every segment saves only its input, and backward recomputes it
//             (framework/autodiff/recompute.h), as torch.utils.checkpoint_sequential. The head, the
//             segment that produces the model's output, runs plainly, so the loss reads the output
//             (and a softmax's logits) as it does without remat. Gradients are bit-identical.
// Keras's other modes (full, larger_than, list_of_layers) are not implemented yet.
#pragma once

#include <string>

namespace keel {

enum class Remat { none, segments };

const char* remat_name(Remat remat);  // "none", "segments"
// "none" | "segments"; std::invalid_argument naming what works otherwise.
Remat parse_remat(const std::string& text);

}  // namespace keel
