// ops.cpp: the C++ side of the per-op microbenchmark (bench/cmd/opbench is the Go side,
// bench/python/ops.py the Python side): the same two tiny ops on the same libtorch, so
// that the difference is each language's cost of calling an op.
//
//   ops [--n 100000] [--reps 7] [--block 100] [--threads 1] [--ops add,linear] [--pair 1]
//
// "add" is at::add of two 16-element float32 tensors; "linear" is torch::nn::Linear(16,
// 16)'s forward on a [1, 16] input with autograd recording. Results are kept in a vector
// of --block and released together, as gotrain's scope frees a block's results. The first
// rep is a warm-up. One JSON object goes to stdout (fields as opbench's). With --pair 1 each
// rep waits for a line on stdin and reports "rep N" when done (N counts the reps of every op
// from 1), so that the driver can run it in turns with opbench (bench/README.md).
#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  int64_t n = 100000, reps = 7, block = 100, threads = 1, pair = 0;
  std::string only = "add,linear";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--ops") {
      only = argv[i + 1];
      continue;
    }
    int64_t v = std::stoll(argv[i + 1]);
    if (k == "--n") n = v;
    else if (k == "--reps") reps = v;
    else if (k == "--block") block = v;
    else if (k == "--threads") threads = v;
    else if (k == "--pair") pair = v;
    else { std::cerr << "ops: unknown flag " << k << "\n"; return 2; }
  }
  at::set_num_threads(threads);
  auto a = torch::arange(16, torch::kFloat32) * 0.25, b = a.clone(), x = a.clone().view({1, 16});
  torch::nn::Linear lin(16, 16);
  std::map<std::string, std::function<torch::Tensor()>> all = {
      {"add", [&] { return at::add(a, b); }},
      {"linear", [&] { return lin->forward(x); }},
  };
  std::vector<std::pair<std::string, std::function<torch::Tensor()>>> ops;
  std::stringstream names(only);
  for (std::string name; std::getline(names, name, ',');) {
    if (!all.count(name)) {
      std::cerr << "ops: --ops: no op " << name << " (add, linear)\n";
      return 2;
    }
    ops.emplace_back(name, all[name]);
  }
  std::vector<torch::Tensor> kept;
  kept.reserve(block);
  std::ostringstream js;
  int64_t turn = 0;
  js << "{\"impl\":\"cpp\",\"torch\":\"" << TORCH_VERSION << "\",\"threads\":" << at::get_num_threads()
     << ",\"block\":" << block << ",\"n\":" << n << ",\"ns_per_op\":{";
  for (size_t o = 0; o < ops.size(); o++) {
    js << (o ? "," : "") << "\"" << ops[o].first << "\":[";
    for (int64_t r = 0; r <= reps; r++) {
      std::string line;
      if (pair && !std::getline(std::cin, line)) {
        std::cerr << "ops: --pair: stdin closed before rep " << turn + 1 << "\n";
        return 2;
      }
      auto t0 = std::chrono::steady_clock::now();
      for (int64_t done = 0; done < n; done += block) {
        for (int64_t k = 0; k < block; k++) kept.push_back(ops[o].second());
        kept.clear();
      }
      double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / n;
      if (r > 0) js << (r > 1 ? "," : "") << ns;
      if (pair) std::cout << "rep " << ++turn << std::endl;
    }
    js << "]";
  }
  js << "}}";
  std::cout << js.str() << "\n";
  return 0;
}
