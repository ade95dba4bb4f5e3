// Model::recompute_batch_statistics (precise BN, issue 17): the moving statistics become the plain
// average of the given batches' per-replica statistics, the weights stay as they were, and each
// layer's own momentum governs the updates after it.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <vector>

#include "framework/layers/core_layers.h"
#include "framework/layers/normalization.h"
#include "framework/model/model.h"
#include "framework/train/losses.h"
#include "framework/train/optimizers.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using testing::random_host;

constexpr int64_t kChannels = 3, kBatch = 8, kRows = 32;

struct Net {
  std::unique_ptr<Sequential> model;
  layers::BatchNormalization* bn = nullptr;
};

Net make_net(ReplicatedStrategy& strategy) {
  auto scope = strategy.scope();
  layers::BatchNormalization::Options o;
  o.input_shape = Shape{kChannels};
  auto bn = BatchNormalization(o);
  Net net{std::make_unique<Sequential>(std::vector<LayerPtr>{bn}), bn.get()};
  net.model->compile(std::make_shared<Adam>(), std::make_shared<SparseCategoricalCrossentropy>());
  net.bn->gamma()->assign(random_host({kChannels}, 0.5f, 1.5f, 3));
  return net;
}

// Per channel: the mean over batches and replicas of each shard's mean / biased variance.
std::vector<std::vector<double>> average_of_shard_statistics(const Tensor& x, int batches, int replicas) {
  std::vector<double> mean(kChannels, 0.0), variance(kChannels, 0.0);
  const std::vector<float> v = x.to_vector();
  const int64_t shard = kBatch / replicas;
  for (int b = 0; b < batches; ++b) {
    for (int r = 0; r < replicas; ++r) {
      const int64_t first = b * kBatch + r * shard;
      for (int64_t c = 0; c < kChannels; ++c) {
        double m = 0.0, s = 0.0;
        for (int64_t i = first; i < first + shard; ++i) m += v[static_cast<size_t>(i * kChannels + c)];
        m /= static_cast<double>(shard);
        for (int64_t i = first; i < first + shard; ++i) s += std::pow(v[static_cast<size_t>(i * kChannels + c)] - m, 2);
        mean[static_cast<size_t>(c)] += m / (batches * replicas);
        variance[static_cast<size_t>(c)] += s / static_cast<double>(shard) / (batches * replicas);
      }
    }
  }
  return {mean, variance};
}

TEST(RecomputeBatchStatisticsTest, MovingStatisticsBecomeTheAverageOfThePerReplicaBatchStatistics) {
  ReplicatedStrategy strategy(DeviceSpec::custom(2, 0));
  Net net = make_net(strategy);
  const Tensor x = random_host({kRows, kChannels}, -2.0f, 3.0f, 11);
  const Tensor y = Tensor::zeros({kRows});
  const std::vector<float> gamma = net.bn->gamma()->value().to_vector();
  const Dataset data = Dataset::from_tensor_slices({x, y}).batch(kBatch, /*drop_remainder=*/true);

  EXPECT_EQ(net.model->recompute_batch_statistics(data, 3), 3);
  std::vector<std::vector<double>> want = average_of_shard_statistics(x, 3, 2);
  const std::vector<float> mean = net.bn->moving_mean()->value().to_vector();
  const std::vector<float> variance = net.bn->moving_variance()->value().to_vector();
  for (size_t c = 0; c < kChannels; ++c) {
    EXPECT_NEAR(mean[c], want[0][c], 1e-5) << c;
    EXPECT_NEAR(variance[c], want[1][c], 1e-5) << c;
  }
  EXPECT_EQ(net.bn->gamma()->value().to_vector(), gamma) << "weights are frozen";

  // More batches than the dataset has: all of them, and the average starts afresh.
  EXPECT_EQ(net.model->recompute_batch_statistics(data, 100), kRows / kBatch);
  want = average_of_shard_statistics(x, kRows / kBatch, 2);
  EXPECT_NEAR(net.bn->moving_mean()->value().to_vector()[0], want[0][0], 1e-5);

  // Afterwards the layer's own momentum (0.99) applies again.
  const std::vector<float> before = net.bn->moving_mean()->value().to_vector();
  net.model->train_step(Batch{x.slice_rows(0, kBatch), y.slice_rows(0, kBatch)});
  const std::vector<double> batch_mean = average_of_shard_statistics(x, 1, 2)[0];
  const std::vector<float> after = net.bn->moving_mean()->value().to_vector();
  for (size_t c = 0; c < kChannels; ++c) EXPECT_NEAR(after[c], before[c] - (before[c] - batch_mean[c]) * 0.01, 1e-5) << c;
}

TEST(RecomputeBatchStatisticsTest, AModelWithoutBatchNormalizationOrNoBatchesIsRefused) {
  ReplicatedStrategy strategy(DeviceSpec::custom(1, 0));
  std::unique_ptr<Sequential> model;
  {
    auto scope = strategy.scope();
    model = std::make_unique<Sequential>(std::vector<LayerPtr>{Dense(2, "linear", Shape{kChannels})});
  }
  const Dataset data =
      Dataset::from_tensor_slices({Tensor::zeros({kRows, kChannels}), Tensor::zeros({kRows})}).batch(kBatch, true);
  EXPECT_THROW(model->recompute_batch_statistics(data, 2), std::invalid_argument);
  Net net = make_net(strategy);
  EXPECT_THROW(net.model->recompute_batch_statistics(data, 0), std::invalid_argument);
  EXPECT_THROW(net.bn->set_update_momentum(1.5), std::invalid_argument);
}

}  // namespace
}  // namespace keel
