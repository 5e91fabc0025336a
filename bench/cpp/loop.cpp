// loop.cpp: the benchmark's training loop written directly against libtorch's C++ API,
// the floor for any binding. It trains the same model from the same initial weights on
// the same data as bench/cmd/goloop (gotrain's Trainer) and bench/python/seed_loop.py
// (the seed's GPUTrainer loop): per step zero_grad, forward, loss, backward, Adam step
// (PyTorch's arithmetic, see AdamStep), loss.item(). Batches are views into one in-memory tensor, so no loader cost is paid.
//
//   loop --workload mlp|mlp256|cnn|cnn-bf16 --dir DIR --threads N --warmup W --reps R --seed S
//
// DIR holds data.bin/init.bin and their manifests, written by `goloop -prep DIR`. One JSON
// object goes to stdout (see bench/README.md for its fields).
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Args {
  std::string workload = "mlp", dir;
  int threads = 1, warmup = 1, reps = 5, check = 50;
  int64_t seed = 1;
};

// rss_mb returns VmRSS or VmHWM (peak) from /proc/self/status, in MiB.
double rss_mb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  size_t n = std::strlen(key);
  while (std::getline(f, line)) {
    if (line.compare(0, n, key) == 0) return std::stod(line.substr(n + 1)) / 1024.0;
  }
  return 0;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Manifest lines: "name dtype numel dim0 dim1 ..." in the order of the .bin file.
struct Entry {
  std::string name, dtype;
  std::vector<int64_t> shape;
};

std::vector<std::pair<Entry, torch::Tensor>> read_tensors(const std::string& base) {
  std::string bin = read_file(base + ".bin");
  std::ifstream man(base + ".txt");
  std::vector<std::pair<Entry, torch::Tensor>> out;
  std::string line;
  size_t off = 0;
  while (std::getline(man, line)) {
    if (line.empty()) continue;
    std::istringstream ls(line);
    Entry e;
    int64_t numel;
    ls >> e.name >> e.dtype >> numel;
    int64_t d;
    while (ls >> d) e.shape.push_back(d);
    auto dt = e.dtype == "f32" ? torch::kFloat32 : torch::kInt64;
    size_t bytes = numel * (e.dtype == "f32" ? 4 : 8);
    if (off + bytes > bin.size()) throw std::runtime_error(base + ".bin is too short");
    auto t = torch::empty(e.shape, dt);
    std::memcpy(t.data_ptr(), bin.data() + off, bytes);
    off += bytes;
    out.emplace_back(e, t);
  }
  return out;
}

torch::nn::Sequential make_model(const std::string& w) {
  namespace nn = torch::nn;
  if (w == "mlp" || w == "mlp256") {
    int64_t hidden = w == "mlp" ? 32 : 256;
    return nn::Sequential(nn::Flatten(), nn::Linear(784, hidden), nn::ReLU(), nn::Linear(hidden, 10));
  }
  return nn::Sequential(
      nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)), nn::BatchNorm2d(32), nn::ReLU(),
      nn::MaxPool2d(nn::MaxPool2dOptions(2)),
      nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)), nn::BatchNorm2d(64), nn::ReLU(),
      nn::MaxPool2d(nn::MaxPool2dOptions(2)), nn::Flatten(), nn::Dropout(0.25),
      nn::Linear(64 * 7 * 7, 128), nn::ReLU(), nn::Linear(128, 10));
}

int64_t batch_size(const std::string& w) {
  if (w == "mlp") return 16;
  if (w == "mlp256") return 64;
  return 128;
}

// AdamStep is torch.optim.Adam's step on the CPU (_single_tensor_adam, lr 1e-3, betas
// (0.9, 0.999), eps 1e-8) in ATen ops. torch::optim::Adam updates exp_avg with mul_ and
// add_ where PyTorch uses lerp_; the rounding differs, and under bf16 autocast the loss
// drifts from PyTorch's by 1e-4 within a dozen steps, so the C++ floor uses PyTorch's
// arithmetic, as gotrain does.
struct AdamStep {
  std::vector<torch::Tensor> params, exp_avg, exp_avg_sq;
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, step = 0;
  explicit AdamStep(std::vector<torch::Tensor> ps) : params(std::move(ps)) {
    for (auto& p : params) {
      exp_avg.push_back(torch::zeros_like(p, at::MemoryFormat::Preserve));
      exp_avg_sq.push_back(torch::zeros_like(p, at::MemoryFormat::Preserve));
    }
  }
  void zero_grad() {
    for (auto& p : params) p.mutable_grad().reset();
  }
  void step_() {
    torch::NoGradGuard ng;
    step += 1;
    double bc1 = 1 - std::pow(beta1, step), bc2 = 1 - std::pow(beta2, step);
    double step_size = lr / bc1, bc2_sqrt = std::sqrt(bc2);
    for (size_t i = 0; i < params.size(); i++) {
      const auto& g = params[i].grad();
      if (!g.defined()) continue;
      exp_avg[i].lerp_(g, 1 - beta1);
      exp_avg_sq[i].mul_(beta2).addcmul_(g, g, 1 - beta2);
      auto denom = (exp_avg_sq[i].sqrt() / bc2_sqrt).add_(eps);
      params[i].addcdiv_(exp_avg[i], denom, -step_size);
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--workload") a.workload = v;
    else if (k == "--dir") a.dir = v;
    else if (k == "--threads") a.threads = std::stoi(v);
    else if (k == "--warmup") a.warmup = std::stoi(v);
    else if (k == "--reps") a.reps = std::stoi(v);
    else if (k == "--check") a.check = std::stoi(v);
    else if (k == "--seed") a.seed = std::stoll(v);
    else { std::cerr << "loop: unknown flag " << k << "\n"; return 2; }
  }
  at::set_num_threads(a.threads);
  bool bf16 = a.workload == "cnn-bf16";

  auto data = read_tensors(a.dir + "/data");
  torch::Tensor X = data.at(0).second, Y = data.at(1).second;
  int64_t B = batch_size(a.workload);
  int64_t steps = X.size(0) / B;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> batches;
  for (int64_t s = 0; s < steps; s++) batches.emplace_back(X.narrow(0, s * B, B), Y.narrow(0, s * B, B));

  auto model = make_model(a.workload);
  {
    std::map<std::string, torch::Tensor> named;
    for (auto& p : model->named_parameters()) named[p.key()] = p.value();
    for (auto& b : model->named_buffers()) named[b.key()] = b.value();
    torch::NoGradGuard ng;
    auto init = read_tensors(a.dir + "/init");
    if (init.size() != named.size()) throw std::runtime_error("init weights do not match the model");
    for (auto& [e, t] : init) named.at(e.name).copy_(t.view(named.at(e.name).sizes()));
  }
  AdamStep opt(model->parameters());
  torch::Device device(torch::kCPU);
  model->to(device);
  torch::manual_seed(a.seed);

  std::vector<double> losses, epoch_s, rss;
  int epochs = a.warmup + a.reps;
  model->train();
  for (int ep = 0; ep < epochs; ep++) {
    auto t0 = std::chrono::steady_clock::now();
    for (auto& [xb, yb] : batches) {
      auto x = xb.to(device), y = yb.to(device);
      opt.zero_grad();
      torch::Tensor loss;
      if (bf16) {
        at::autocast::set_autocast_enabled(at::kCPU, true);
        at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
        at::autocast::increment_nesting();
        auto out = model->forward(x);
        loss = torch::nn::functional::cross_entropy(out, y);
        if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
        at::autocast::set_autocast_enabled(at::kCPU, false);
      } else {
        auto out = model->forward(x);
        loss = torch::nn::functional::cross_entropy(out, y);
      }
      loss.backward();
      opt.step_();
      double l = loss.item<double>();
      if (ep == 0 && (int)losses.size() < a.check) losses.push_back(l);
    }
    epoch_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    rss.push_back(rss_mb("VmRSS:"));
  }

  auto arr = [](const std::vector<double>& v) {
    std::ostringstream s;
    s.precision(17);
    s << "[";
    for (size_t i = 0; i < v.size(); i++) s << (i ? "," : "") << v[i];
    return s.str() + "]";
  };
  std::cout << "{\"impl\":\"cpp\",\"torch\":\"" << TORCH_VERSION << "\",\"workload\":\"" << a.workload << "\",\"threads\":" << at::get_num_threads()
            << ",\"steps\":" << steps << ",\"batch\":" << B << ",\"warmup\":" << a.warmup
            << ",\"epoch_s\":" << arr(epoch_s) << ",\"rss_mb\":" << arr(rss)
            << ",\"peak_rss_mb\":" << rss_mb("VmHWM:") << ",\"losses\":" << arr(losses) << "}\n";
  return 0;
}
