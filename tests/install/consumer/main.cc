// Trains a small replicated MLP through the installed headers and library, saves and reloads a
// checkpoint, and prints what it measured; exit status 0 only when everything checks out.
#include <keel/keel.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: app SCRATCH_DIR\n");
    return 2;
  }
  keel::ReplicatedStrategy strategy(keel::DeviceSpec::custom(2, 0));
  std::unique_ptr<keel::Sequential> model;
  {
    auto scope = strategy.scope();
    model = std::make_unique<keel::Sequential>(std::vector<keel::LayerPtr>{
        keel::Dense(8, "relu", keel::Shape{4}), keel::BatchNormalization(), keel::Dense(3, "softmax")});
    model->compile(std::make_shared<keel::Adam>(), std::make_shared<keel::SparseCategoricalCrossentropy>());
  }
  std::vector<float> x(64 * 4), y(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 11) / 11.0f;
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(i % 3);
  auto train = keel::data::from_tensor_slices({keel::Tensor::from_vector({64, 4}, x), keel::Tensor::from_vector({64}, y)})
                   .shuffle(64, 1)
                   .batch(16, /*drop_remainder=*/true);
  keel::History history = model->fit(train, {.epochs = 3});
  const std::string path = (std::filesystem::path(argv[1]) / "ckpt.h5").string();
  keel::TrainState state;
  state.step = model->optimizer().iterations();
  keel::save_checkpoint(path, *model, model->optimizer(), state);
  keel::load_checkpoint(path, *model, model->optimizer());
  const int64_t peak = strategy.ledger().core(1).total().peak;
  std::printf("loss %.4f after %lld steps; core 1 peak %lld bytes\n", history.epochs.back().at("loss"),
              static_cast<long long>(model->optimizer().iterations()), static_cast<long long>(peak));
  return model->optimizer().iterations() == 12 && peak > 0 ? 0 : 1;
}
