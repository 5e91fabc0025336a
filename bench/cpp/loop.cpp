// loop.cpp: the benchmark's training loop written directly against libtorch's C++ API,
// the floor for any binding. It trains the same model from the same initial weights on
// the same data as bench/cmd/goloop (gotrain's Trainer) and bench/python/seed_loop.py
// (the seed's GPUTrainer loop): per step zero_grad (grads set to none), forward, loss,
// backward, Adam step, loss.item(). Each step narrows its batch out of the in-memory
// tensors (a view, no copy), as gotrain's Loader does for a resident dataset and as
// goloop -raw does, so the step calls the same ATen functions as the Trainer's; no loader
// cost beyond that is paid.
//
// --adam picks the Adam kernel, so that each gotrain and Python column has a twin here
// that runs the same ATen calls:
//   fused    at::_fused_adam_ over all parameters: what gotrain's default Adam
//            (optim.AdamOptions{Fused: true}) and Python's Adam(fused=True) call
//   foreach  the multi-tensor _foreach_* calls of cgotorch/optim.cc (gotrain with
//            Fused: false), which are torch.optim's _multi_tensor_adam: Python's
//            Adam(foreach=True)
//   single   torch.optim's _single_tensor_adam, per-tensor ops: PyTorch's default on the
//            CPU (foreach is only the default when every tensor is on CUDA), which the
//            seed's loop runs
//
//   loop --workload mlp|mlp256|cnn|cnn-bf16 --dir DIR --threads N --warmup W --reps R --seed S
//        [--adam fused|foreach|single] [--pair 1]
//
// DIR holds data.bin/init.bin and their manifests, written by `goloop -prep DIR`. One JSON
// object goes to stdout (see bench/README.md for its fields). With --pair 1 each epoch
// waits for a line on stdin and reports "epoch N" on stdout when done, so that the driver
// can run it in turns with another loop (paired epochs, bench/README.md).
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
  std::string workload = "mlp", dir, adam = "single";
  int threads = 1, warmup = 1, reps = 5, check = 50;
  int64_t seed = 1;
  bool pair = false;
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

// Adam holds the parameters and Adam's state as torch.optim.Adam keeps them (step as a
// 0-dim float32 tensor per parameter), with lr 1e-3, betas (0.9, 0.999), eps 1e-8, no
// weight decay: the hyperparameters every implementation uses.
struct Adam {
  std::vector<torch::Tensor> params, exp_avg, exp_avg_sq, steps;
  std::string kind;
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  Adam(std::vector<torch::Tensor> ps, std::string k) : params(std::move(ps)), kind(std::move(k)) {
    if (kind != "fused" && kind != "foreach" && kind != "single") throw std::runtime_error("--adam " + kind);
    for (auto& p : params) {
      exp_avg.push_back(torch::zeros_like(p, at::MemoryFormat::Preserve));
      exp_avg_sq.push_back(torch::zeros_like(p, at::MemoryFormat::Preserve));
      steps.push_back(torch::zeros({}, torch::kFloat32));
    }
  }
  void zero_grad() {
    for (auto& p : params) p.mutable_grad().reset();
  }
  void step() {
    torch::NoGradGuard ng;
    // Every workload's parameters all get a gradient every step.
    std::vector<torch::Tensor> grads;
    for (auto& p : params) grads.push_back(p.grad());
    if (kind == "fused") return fused(grads);
    if (kind == "foreach") return foreach(grads);
    single(grads);
  }
  // fused is torch.optim.Adam(fused=True) on the CPU and cgotorch/optim.cc's fused path.
  void fused(const std::vector<torch::Tensor>& grads) {
    at::_foreach_add_(steps, 1);
    at::_fused_adam_(params, grads, exp_avg, exp_avg_sq, {}, steps, lr, beta1, beta2, 0, eps, false, false);
  }
  // foreach is cgotorch/optim.cc's unfused path (torch.optim's _multi_tensor_adam).
  void foreach(const std::vector<torch::Tensor>& grads) {
    at::_foreach_add_(steps, 1);
    at::_foreach_lerp_(exp_avg, grads, 1 - beta1);
    at::_foreach_mul_(exp_avg_sq, beta2);
    at::_foreach_addcmul_(exp_avg_sq, grads, grads, 1 - beta2);
    std::vector<at::Scalar> step_size, bc2_sqrt;
    for (auto& st : steps) {
      double s = st.item<double>();
      step_size.emplace_back((lr / (1 - std::pow(beta1, s))) * -1);
      bc2_sqrt.emplace_back(std::pow(1 - std::pow(beta2, s), 0.5));
    }
    auto denom = at::_foreach_sqrt(exp_avg_sq);
    at::_foreach_div_(denom, bc2_sqrt);
    at::_foreach_add_(denom, eps);
    at::_foreach_addcdiv_(params, exp_avg, denom, step_size);
  }
  // single is torch.optim's _single_tensor_adam (capturable=False, differentiable=False).
  void single(const std::vector<torch::Tensor>& grads) {
    for (size_t i = 0; i < params.size(); i++) {
      steps[i].add_(1);
      double s = steps[i].item<double>();
      double step_size = lr / (1 - std::pow(beta1, s)), bc2_sqrt = std::pow(1 - std::pow(beta2, s), 0.5);
      exp_avg[i].lerp_(grads[i], 1 - beta1);
      exp_avg_sq[i].mul_(beta2).addcmul_(grads[i], grads[i], 1 - beta2);
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
    else if (k == "--adam") a.adam = v;
    else if (k == "--pair") a.pair = v == "1";
    else { std::cerr << "loop: unknown flag " << k << "\n"; return 2; }
  }
  // RSS with the libraries loaded and nothing allocated yet: the baseline the driver
  // subtracts, since each language's process maps different libraries.
  double base_rss = rss_mb("VmRSS:");
  at::set_num_threads(a.threads);
  bool bf16 = a.workload == "cnn-bf16";

  auto data = read_tensors(a.dir + "/data");
  torch::Tensor X = data.at(0).second, Y = data.at(1).second;
  int64_t B = batch_size(a.workload);
  int64_t steps = X.size(0) / B;

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
  Adam opt(model->parameters(), a.adam);
  torch::Device device(torch::kCPU);
  model->to(device);
  torch::manual_seed(a.seed);

  std::vector<double> losses, epoch_s, rss;
  int epochs = a.warmup + a.reps;
  model->train();
  for (int ep = 0; ep < epochs; ep++) {
    std::string turn;
    if (a.pair && !std::getline(std::cin, turn)) throw std::runtime_error("--pair: stdin closed before epoch " + std::to_string(ep + 1));
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t s = 0; s < steps; s++) {
      auto x = X.narrow(0, s * B, B).to(device), y = Y.narrow(0, s * B, B).to(device);
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
      opt.step();
      double l = loss.item<double>();
      if (ep == 0 && (int)losses.size() < a.check) losses.push_back(l);
    }
    epoch_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    rss.push_back(rss_mb("VmRSS:"));
    if (a.pair) std::cout << "epoch " << ep + 1 << std::endl;
  }

  auto arr = [](const std::vector<double>& v) {
    std::ostringstream s;
    s.precision(17);
    s << "[";
    for (size_t i = 0; i < v.size(); i++) s << (i ? "," : "") << v[i];
    return s.str() + "]";
  };
  std::cout << "{\"impl\":\"cpp-" << a.adam << "\",\"adam\":\"" << a.adam << "\",\"torch\":\"" << TORCH_VERSION << "\",\"workload\":\"" << a.workload << "\",\"threads\":" << at::get_num_threads()
            << ",\"steps\":" << steps << ",\"batch\":" << B << ",\"warmup\":" << a.warmup
            << ",\"epoch_s\":" << arr(epoch_s) << ",\"rss_mb\":" << arr(rss)
            << ",\"base_rss_mb\":" << base_rss << ",\"peak_rss_mb\":" << rss_mb("VmHWM:") << ",\"losses\":" << arr(losses) << "}\n";
  return 0;
}
