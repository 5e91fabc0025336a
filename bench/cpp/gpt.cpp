// gpt.cpp: the C++ twin of bench/gpt (bench/gpt/main.go): the same GPT-2 (4 layers of width 128, 4 heads,
// byte vocabulary) written against ATen as gotrain's models.GPT2LMHeadModel runs it
// (embedding, layer_norm, addmm for Conv1D, scaled_dot_product_attention, GELU tanh,
// tied output projection, cross-entropy over shifted labels, fused AdamW), timed the
// same way: the floor for any binding on this libtorch. Its weights are its own draw of
// the same shapes (the cost does not depend on the values).
//
//   gpt BATCH SEQ STEPS WARMUP NEW THREADS   prints one JSON object
#include <torch/torch.h>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace {

constexpr int64_t V = 256, E = 128, L = 4, H = 4;

struct Layer {
  at::Tensor ln1w, ln1b, attnw, attnb, projw, projb, ln2w, ln2b, fcw, fcb, fc2w, fc2b;
};

struct Model {
  at::Tensor wte, wpe, lnfw, lnfb;
  std::vector<Layer> layers;
  std::vector<at::Tensor*> params() {
    std::vector<at::Tensor*> out{&wte, &wpe};
    for (auto& l : layers)
      for (auto* p : {&l.ln1w, &l.ln1b, &l.attnw, &l.attnb, &l.projw, &l.projb, &l.ln2w, &l.ln2b, &l.fcw, &l.fcb, &l.fc2w, &l.fc2b})
        out.push_back(p);
    out.push_back(&lnfw);
    out.push_back(&lnfb);
    return out;
  }
};

at::Tensor normal(std::vector<int64_t> shape, double std) { return torch::randn(shape) * std; }

Model make_model(int64_t positions) {
  Model m;
  m.wte = normal({V, E}, 0.02);
  m.wpe = normal({positions, E}, 0.02);
  for (int i = 0; i < L; i++) {
    Layer l{torch::ones({E}), torch::zeros({E}), normal({E, 3 * E}, 0.02), torch::zeros({3 * E}),
            normal({E, E}, 0.01), torch::zeros({E}), torch::ones({E}), torch::zeros({E}),
            normal({E, 4 * E}, 0.02), torch::zeros({4 * E}), normal({4 * E, E}, 0.01), torch::zeros({E})};
    m.layers.push_back(l);
  }
  m.lnfw = torch::ones({E});
  m.lnfb = torch::zeros({E});
  for (auto* p : m.params()) p->set_requires_grad(true);
  return m;
}

at::Tensor conv1d(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  auto shape = x.sizes().vec();
  shape.back() = w.size(1);
  return at::addmm(b, x.reshape({-1, x.size(-1)}), w).view(shape);
}

// forward returns the logits of ids [B, T]; with a cache (keys then values per layer)
// it attends to the cached positions too and extends the cache.
at::Tensor forward(Model& m, const at::Tensor& ids, std::vector<at::Tensor>* cache) {
  int64_t b = ids.size(0), t = ids.size(1), past = (cache && !cache->empty()) ? (*cache)[0].size(2) : 0;
  auto x = at::embedding(m.wte, ids) + at::embedding(m.wpe, torch::arange(past, past + t, torch::kLong));
  for (int i = 0; i < L; i++) {
    auto& l = m.layers[i];
    auto h = at::layer_norm(x, {E}, l.ln1w, l.ln1b, 1e-5);
    auto qkv = conv1d(h, l.attnw, l.attnb).split(E, 2);
    auto heads = [&](const at::Tensor& y) { return y.view({b, t, H, E / H}).transpose(1, 2); };
    auto q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
    if (cache) {
      if (past > 0) {
        k = at::cat({(*cache)[2 * i], k}, 2);
        v = at::cat({(*cache)[2 * i + 1], v}, 2);
        (*cache)[2 * i] = k;
        (*cache)[2 * i + 1] = v;
      } else {
        cache->push_back(k);
        cache->push_back(v);
      }
    }
    auto y = at::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, past == 0, 1 / std::sqrt(double(E / H)));
    x = x + conv1d(y.transpose(1, 2).reshape({b, t, E}), l.projw, l.projb);
    h = at::layer_norm(x, {E}, l.ln2w, l.ln2b, 1e-5);
    x = x + conv1d(at::gelu(conv1d(h, l.fcw, l.fcb), "tanh"), l.fc2w, l.fc2b);
  }
  return at::linear(at::layer_norm(x, {E}, m.lnfw, m.lnfb, 1e-5), m.wte);
}

double seconds(std::chrono::steady_clock::time_point a) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: gpt BATCH SEQ STEPS WARMUP NEW THREADS\n");
    return 2;
  }
  int64_t batch = std::stoll(argv[1]), seq = std::stoll(argv[2]), steps = std::stoll(argv[3]), warmup = std::stoll(argv[4]),
          n_new = std::stoll(argv[5]);
  at::set_num_threads(std::stoi(argv[6]));
  torch::manual_seed(0);
  Model m = make_model(2 * seq);

  // Greedy generation with the KV cache, batch 1, the 16-token prompt of main.go.
  double gen_s = 0;
  {
    torch::NoGradGuard ng;
    std::vector<int64_t> prompt;
    for (int i = 0; i < 16; i++) prompt.push_back((i * 7) % V);
    for (int rep = 0; rep < 2; rep++) {  // the first is the warm-up
      int64_t total = rep == 0 ? 4 : n_new;
      auto start = std::chrono::steady_clock::now();
      std::vector<at::Tensor> cache;
      auto next = torch::tensor(prompt, torch::kLong).view({1, -1});
      for (int64_t i = 0; i < total; i++) {
        auto logits = forward(m, next, &cache);
        int64_t tok = logits.select(1, logits.size(1) - 1).argmax(-1).item<int64_t>();
        next = torch::tensor({tok}, torch::kLong).view({1, 1});
      }
      gen_s = seconds(start);
    }
  }

  // Training: the batches main.go and bench.py draw.
  torch::manual_seed(1);
  std::vector<at::Tensor> batches;
  for (int64_t i = 0; i < warmup + steps; i++) batches.push_back(torch::randint(0, V, {batch, seq}, torch::kLong));
  std::vector<at::Tensor> params, exp_avg, exp_avg_sq, state_steps;
  for (auto* p : m.params()) {
    params.push_back(*p);
    exp_avg.push_back(torch::zeros_like(*p));
    exp_avg_sq.push_back(torch::zeros_like(*p));
    state_steps.push_back(torch::zeros({}, torch::kFloat32));
  }
  double first = 0;
  auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < warmup + steps; i++) {
    if (i == warmup) start = std::chrono::steady_clock::now();
    for (auto& p : params) p.mutable_grad().reset();
    auto& ids = batches[i];
    auto logits = forward(m, ids, nullptr);
    auto target = at::cat({ids.narrow(1, 1, seq - 1), torch::full({batch, 1}, -100, torch::kLong)}, 1);
    auto loss = at::cross_entropy_loss(logits.reshape({-1, V}), target.reshape({-1}), {}, at::Reduction::Mean, -100);
    loss.backward();
    {
      torch::NoGradGuard ng;
      std::vector<at::Tensor> grads;
      for (auto& p : params) grads.push_back(p.grad());
      at::_foreach_add_(state_steps, 1);
      at::_fused_adamw_(params, grads, exp_avg, exp_avg_sq, {}, state_steps, 1e-3, 0.9, 0.999, 1e-2, 1e-8, false, false);
    }
    double l = loss.item<double>();
    if (i == 0) first = l;
  }
  double train_s = seconds(start);
  std::printf("{\"train_tokens_per_s\": %f, \"gen_tokens_per_s\": %f, \"first_loss\": %f, \"generated\": []}\n",
              steps * batch * seq / train_s, n_new / gen_s, first);
  return 0;
}
