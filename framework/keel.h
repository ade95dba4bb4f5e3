// keel's public API in one include: `#include <keel/keel.h>` from an installed keel
// (find_package(keel) + target_link_libraries(app keel::keel)), or "framework/keel.h" in the tree.
// The input sources (IDX/Fashion-MNIST, TFRecord, images) are in datasets/, the zoo in models/:
// include those headers as well when you use them (<keel/datasets/fashion_mnist.h>, <keel/models/zoo.h>).
#pragma once

#include "framework/autodiff/recompute.h"
#include "framework/autodiff/tape.h"
#include "framework/checkpoint/checkpoint.h"
#include "framework/checkpoint/run_directory.h"
#include "framework/core/dtype.h"
#include "framework/core/fiber_locals.h"
#include "framework/core/host_threads.h"
#include "framework/core/tensor.h"
#include "framework/core/thread_pool.h"
#include "framework/data/data.h"
#include "framework/device/device_spec.h"
#include "framework/device/layout.h"
#include "framework/device/ledger.h"
#include "framework/device/sharding.h"
#include "framework/device/strategy.h"
#include "framework/layers/conv_layers.h"
#include "framework/layers/core_layers.h"
#include "framework/layers/dtype_policy.h"
#include "framework/layers/initializers.h"
#include "framework/layers/normalization.h"
#include "framework/model/callbacks.h"
#include "framework/model/functional.h"
#include "framework/model/model.h"
#include "framework/model/planner.h"
#include "framework/model/remat.h"
#include "framework/ops/precision.h"
#include "framework/train/losses.h"
#include "framework/train/optimizers.h"
