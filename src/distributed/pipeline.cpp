// Pipeline parallelism: the pieces of the zoo's models, cutting them into
// stages, and running a rank's schedule (tessera/distributed/pipeline.h).
#include "tessera/distributed/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <set>

#include "tessera/autograd/checkpoint.h"
#include "tessera/autograd/engine.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/nn/container.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/ops/ops.h"

namespace tessera::distributed {

// ---- pieces ------------------------------------------------------------------------------

namespace {

void check_ids(const Tensor& ids, const char* model, int64_t max_len) {
  TS_CHECK(ids.dim() == 2 && !is_floating(ids.dtype()), model, ": expected integer token ids [batch, seq], got ",
           dtype_name(ids.dtype()), " ", shape_str(ids.shape()));
  TS_CHECK(ids.size(1) <= max_len, model, ": sequence length ", ids.size(1), " exceeds ", max_len);
}

template <typename List>
void add_blocks(std::vector<PipePiece>& pieces, const std::string& prefix, List& list) {
  for (size_t i = 0; i < list.size(); ++i) {
    nn::ModulePtr b = list[i];
    pieces.push_back({prefix + std::to_string(i), [b](const Tensor& x) { return (*b)(x); }, {b.get()}, true});
  }
}

}  // namespace

std::vector<PipePiece> pipeline_pieces(nn::Module& model) {
  std::vector<PipePiece> pieces;
  if (auto* g = dynamic_cast<nn::zoo::GPT*>(&model)) {
    pieces.push_back({"embed",
                      [g](const Tensor& ids) {
                        check_ids(ids, "GPT", g->config.block_size);
                        Tensor pos = arange(ids.size(1), DType::I64);
                        return (*g->drop)(ops::add((*g->wte)(ids), (*g->wpe)(pos)));
                      },
                      {g->wte.get(), g->wpe.get(), g->drop.get()},
                      false});
    add_blocks(pieces, "transformer.h.", *g->h);
    nn::Module* head = g->lm_head ? static_cast<nn::Module*>(g->lm_head.get()) : g->tied_head.get();
    pieces.push_back({"head", [g, head](const Tensor& x) { return (*head)((*g->ln_f)(x)); }, {g->ln_f.get(), head}, false});
  } else if (auto* l = dynamic_cast<nn::zoo::Llama*>(&model)) {
    pieces.push_back({"embed",
                      [l](const Tensor& ids) {
                        check_ids(ids, "Llama", l->config.max_seq_len);
                        return (*l->model->embed_tokens)(ids);
                      },
                      {l->model->embed_tokens.get()},
                      false});
    add_blocks(pieces, "model.layers.", *l->model->layers);
    nn::Module* head = l->lm_head ? static_cast<nn::Module*>(l->lm_head.get()) : l->tied_head.get();
    pieces.push_back(
        {"head", [l, head](const Tensor& x) { return (*head)((*l->model->norm)(x)); }, {l->model->norm.get(), head}, false});
  } else if (auto* s = dynamic_cast<nn::Sequential*>(&model)) {
    auto children = s->named_children();
    for (auto& [name, child] : children) {
      nn::ModulePtr c = child;
      pieces.push_back({name, [c](const Tensor& x) { return (*c)(x); }, {c.get()}, true});
    }
  } else {
    TS_ERROR("pipeline: a ", model.type_name(), " cannot be cut into stages; the zoo's GPT and Llama and a "
             "Sequential can");
  }
  return pieces;
}

// ---- stages ------------------------------------------------------------------------------

namespace {

int64_t parameter_count(const PipePiece& p) {
  int64_t n = 0;
  for (nn::Module* m : p.modules) n += m->num_parameters();
  return n;
}

// Contiguous parts of `costs`, `parts` of them, none empty, the largest sum
// as small as it can be (dynamic programming over the cut points).
std::vector<int> balanced_cuts(const std::vector<double>& costs, int parts) {
  const int n = static_cast<int>(costs.size());
  std::vector<double> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  const double inf = std::numeric_limits<double>::infinity();
  // best[k][i]: the smallest largest part cutting the first i pieces into k parts.
  std::vector<std::vector<double>> best(parts + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> from(parts + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= parts; ++k)
    for (int i = k; i <= n; ++i)
      for (int j = k - 1; j < i; ++j) {
        const double v = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (v < best[k][i]) best[k][i] = v, from[k][i] = j;
      }
  std::vector<int> starts(parts);
  for (int k = parts, i = n; k >= 1; --k) {
    starts[k - 1] = from[k][i];
    i = from[k][i];
  }
  return starts;
}

}  // namespace

std::vector<int> pipeline_boundaries(const std::vector<PipePiece>& pieces, int stages, const PipelineOptions& o) {
  const int n = static_cast<int>(pieces.size());
  TS_CHECK(stages >= 1, "pipeline: the number of stages must be positive, got ", stages);
  if (o.split == "layers") {
    std::vector<int> layers;
    for (int i = 0; i < n; ++i)
      if (pieces[i].layer) layers.push_back(i);
    const int L = static_cast<int>(layers.size());
    TS_CHECK(L >= stages, "pipeline: the model has ", L, " layers, too few for ", stages, " stages (",
             o.virtual_stages > 1 ? "ranks times virtual_stages" : "one per rank", "); use at most ", L, " stages");
    std::vector<int> starts{0};
    for (int k = 1; k < stages; ++k) starts.push_back(layers[static_cast<size_t>(k) * L / stages]);
    return starts;
  }
  std::vector<double> costs;
  if (o.split == "parameters") {
    for (const PipePiece& p : pieces) costs.push_back(static_cast<double>(parameter_count(p)));
  } else if (o.split == "costs") {
    TS_CHECK(static_cast<int>(o.costs.size()) == n, "pipeline: split 'costs' needs one cost per piece (", n,
             " pieces), got ", o.costs.size());
    for (double c : o.costs)
      TS_CHECK(std::isfinite(c) && c >= 0, "pipeline: costs must be finite and non-negative, got ", c);
    costs = o.costs;
  } else {
    TS_ERROR("pipeline: unknown split '", o.split, "'; expected layers, parameters, costs or time (a Pipeline times "
             "the pieces itself)");
  }
  TS_CHECK(n >= stages, "pipeline: the model has ", n, " pieces, too few for ", stages, " stages");
  return balanced_cuts(costs, stages);
}

namespace {

// Each piece's forward time on `sample`, the median of 3 runs without
// gradients, the output of one piece the input of the next.
std::vector<double> piece_times(const std::vector<PipePiece>& pieces, Tensor sample, nn::Module& model) {
  if (!sample.defined()) {
    int64_t context = 0;
    if (auto* g = dynamic_cast<nn::zoo::GPT*>(&model)) context = g->config.block_size;
    if (auto* l = dynamic_cast<nn::zoo::Llama*>(&model)) context = l->config.max_seq_len;
    TS_CHECK(context > 0, "pipeline: split 'time' needs PipelineOptions::sample, a micro-batch's input, to time ",
             "the pieces of a ", model.type_name(), " on");
    sample = zeros({1, context}, DType::I64);
  }
  NoGradGuard no_grad;
  std::vector<double> out;
  Tensor x = sample;
  for (const PipePiece& p : pieces) {
    std::vector<double> runs;
    Tensor y;
    for (int k = 0; k < 3; ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      y = p.run(x);
      runs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(runs.begin(), runs.end());
    out.push_back(runs[1]);
    x = y;
  }
  return out;
}

}  // namespace

// ---- the pipeline ----------------------------------------------------------------------------

namespace {

// The schedule, the stages and the cut, as one number, to compare across ranks.
int64_t fingerprint(const Schedule& s, const std::vector<int>& starts, bool checkpoint) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  for (char c : s.name) mix(static_cast<uint8_t>(c));
  mix(s.ranks), mix(s.micro_batches), mix(s.virtual_stages), mix(checkpoint);
  for (int b : starts) mix(static_cast<uint64_t>(b));
  return static_cast<int64_t>(h >> 1);
}

std::string describe(const Schedule& s, const std::vector<int>& starts) {
  std::string cut;
  for (int b : starts) cut += (cut.empty() ? "" : ",") + std::to_string(b);
  return s.name + ", " + std::to_string(s.micro_batches) + " micro-batches, " + std::to_string(s.virtual_stages) +
         " virtual stages, stages starting at pieces " + cut;
}

}  // namespace

Pipeline::Pipeline(std::shared_ptr<nn::Module> model, ProcessGroupPtr group, PipelineOptions options, LossFn loss)
    : model_(std::move(model)), group_(std::move(group)), options_(std::move(options)), loss_(std::move(loss)) {
  TS_CHECK(model_ && group_ && loss_, "Pipeline: the model, the group and the loss must be given");
  // Every rank must run the same pipeline, and a rank whose settings are
  // wrong must not leave the others waiting: each rank builds its part, then
  // all compare (failed, or a fingerprint) before going on, twice: after the
  // schedule (and any timing), and after the cut.
  std::string problem;
  auto agree = [&](int64_t print) {
    Tensor mine = tensor(std::vector<int64_t>{problem.empty() ? print : -1}, {1});
    Tensor all = empty({group_->size()}, DType::I64);
    group_->allgather(all, mine)->wait();
    if (!problem.empty()) throw Error(problem);
    for (int q = 0; q < group_->size(); ++q) {
      const int64_t theirs = all[q].item<int64_t>();
      TS_CHECK(theirs != -1, "Pipeline: rank ", q, " of group '", group_->name(), "' could not build its pipeline "
               "(its error says why); every rank must pass the same model and options");
      TS_CHECK(theirs == print, "Pipeline: rank ", q, " of group '", group_->name(), "' runs another pipeline than "
               "rank ", group_->rank(), " (", describe(schedule_, boundaries_), "); every rank must pass the same "
               "model, options and schedule");
    }
  };
  const bool timed = options_.split == "time";
  try {
    schedule_ = make_schedule(options_.schedule, group_->size(), options_.micro_batches, options_.virtual_stages);
    check_schedule(schedule_);
    TS_CHECK(schedule_.stages() < 16384, "Pipeline: ", schedule_.stages(), " stages; at most 16383");
    pieces_ = pipeline_pieces(*model_);
    if (timed) {
      options_.costs = piece_times(pieces_, options_.sample, *model_);
      options_.split = "costs";
    }
  } catch (const Error& e) {
    problem = e.what();
  }
  agree(fingerprint(schedule_, {static_cast<int>(pieces_.size()), timed}, options_.checkpoint));
  if (timed) {  // measured times differ between ranks: every rank cuts by the first's
    Tensor c = tensor(options_.costs, {static_cast<int64_t>(options_.costs.size())});
    group_->broadcast(c, 0)->wait();
    options_.costs = c.to_vector<double>();
  }
  try {
    boundaries_ = pipeline_boundaries(pieces_, schedule_.stages(), options_);
  } catch (const Error& e) {
    problem = e.what();
  }
  agree(fingerprint(schedule_, boundaries_, options_.checkpoint));

  // Keep this rank's stages; the rest of the model goes to meta. A weight a
  // local piece uses but another stage owns (a tied head's) stays.
  std::vector<bool> local(pieces_.size(), false);
  for (int s : local_stages()) {
    const int end = s + 1 < schedule_.stages() ? boundaries_[s + 1] : static_cast<int>(pieces_.size());
    for (int i = boundaries_[s]; i < end; ++i) local[i] = true;
  }
  std::set<const TensorImpl*>& used = used_;
  for (size_t i = 0; i < pieces_.size(); ++i) {
    if (!local[i]) continue;
    for (nn::Module* m : pieces_[i].modules)
      for (nn::Module* sub : m->modules()) {
        for (const Tensor& t : sub->parameters(false)) used.insert(t.impl());
        for (const Tensor& t : sub->shared_parameters()) used.insert(t.impl());
      }
  }
  for (size_t i = 0; i < pieces_.size(); ++i) {
    if (local[i]) continue;
    for (nn::Module* m : pieces_[i].modules) {
      bool shared = false;
      for (const Tensor& t : m->parameters()) shared = shared || used.count(t.impl());
      if (!shared) m->to_empty(Device::meta());
    }
  }

  // A weight of the first stage used again by the last (a tied head), when
  // the two are on different ranks: the pair sums its gradients.
  const int first = schedule_.rank_of(0), last = schedule_.rank_of(schedule_.stages() - 1);
  const int end0 = schedule_.stages() > 1 ? boundaries_[1] : static_cast<int>(pieces_.size());
  std::set<const TensorImpl*> first_params;
  for (int i = 0; i < end0; ++i)
    for (nn::Module* m : pieces_[i].modules)
      for (const Tensor& t : m->parameters()) first_params.insert(t.impl());
  for (nn::Module* m : pieces_.back().modules)
    for (nn::Module* sub : m->modules())
      for (const Tensor& t : sub->shared_parameters())
        if (first_params.count(t.impl())) tied_ = t;
  const bool pair = tied_.defined() && first != last;
  const int r = group_->rank();
  tied_group_ = group_->split(pair && (r == first || r == last) ? 0 : -1);
}

std::vector<int> Pipeline::local_stages() const {
  std::vector<int> out;
  for (int s = group_->rank(); s < schedule_.stages(); s += group_->size()) out.push_back(s);
  return out;
}

bool Pipeline::is_tied_copy(const Tensor& t) const {
  const int last = schedule_.rank_of(schedule_.stages() - 1);
  // By memory, not handle: a state_dict's tensors are detached views.
  return tied_.defined() && !t.device().is_meta() && t.raw_data() == tied_.raw_data() && group_->rank() == last &&
         last != schedule_.rank_of(0);
}

nn::NamedTensors Pipeline::parameters() const {
  nn::NamedTensors out;
  for (auto& [name, p] : model_->named_parameters())
    if (used_.count(p.impl())) out.emplace_back(name, p);
  return out;
}

Tensor Pipeline::run_stage(int stage, const Tensor& input) {
  const int end = stage + 1 < schedule_.stages() ? boundaries_[stage + 1] : static_cast<int>(pieces_.size());
  auto run = [this, stage, end](const Tensor& x) {
    Tensor h = x;
    for (int i = boundaries_[stage]; i < end; ++i) h = pieces_[i].run(h);
    return h;
  };
  return options_.checkpoint ? autograd::checkpoint(run, input) : run(input);
}

// Note [Pipeline messages]
// A tensor goes as two messages on one tag: a header (dtype, rank, sizes)
// and the data, which the receiver then allocates for. Activations from stage
// s use tag 2s and gradients to it 2s + 1; MPI keeps messages of one tag
// between two ranks in order, and check_schedule makes each receiver take
// the micro-batches in the order they are sent. Stages on one rank (one
// rank, or interleaved stages that wrap) hand tensors over in memory.
namespace {

constexpr int kMaxDims = 6;

struct Transfers {
  ProcessGroup& group;
  std::vector<WorkPtr> works;
  std::vector<Tensor> keep;  // alive until the step's sends are done
  std::map<int, std::deque<Tensor>> local;

  void send(const Tensor& t, int peer, int tag) {
    if (peer == group.rank()) {
      local[tag].push_back(t);
      return;
    }
    TS_CHECK(t.dim() <= kMaxDims, "pipeline: a stage's output has ", t.dim(), " dims; at most ", kMaxDims, " can be sent");
    std::vector<int64_t> h{static_cast<int64_t>(t.dtype()), t.dim()};
    for (int64_t s : t.shape()) h.push_back(s);
    h.resize(2 + kMaxDims, 0);
    Tensor header = tensor(h, {static_cast<int64_t>(h.size())});
    Tensor data = t.contiguous();
    keep.push_back(header);
    keep.push_back(data);
    works.push_back(group.send(header, peer, tag));
    works.push_back(group.send(data, peer, tag));
  }

  Tensor recv(int peer, int tag) {
    if (peer == group.rank()) {
      auto& q = local[tag];
      TS_CHECK(!q.empty(), "pipeline: a stage's input was not made on this rank before its use");
      Tensor t = q.front();
      q.pop_front();
      return t;
    }
    Tensor header = empty({2 + kMaxDims}, DType::I64);
    group.recv_now(header, peer, tag);
    const int64_t code = header[0].item<int64_t>(), dims = header[1].item<int64_t>();
    TS_CHECK(code >= 0 && code < kNumDTypes && dims >= 0 && dims <= kMaxDims, "pipeline: rank ", peer,
             " sent a malformed header (dtype ", code, ", ", dims, " dims)");
    Shape shape;
    int64_t numel = 1;
    for (int64_t k = 0; k < dims; ++k) {
      const int64_t s = header[2 + k].item<int64_t>();
      TS_CHECK(s >= 0 && (s == 0 || numel <= (int64_t{1} << 40) / s), "pipeline: rank ", peer,
               " sent a malformed header (size ", s, " at dim ", k, ")");
      shape.push_back(s);
      numel *= s;
    }
    Tensor t = empty(shape, static_cast<DType>(code));
    group.recv_now(t, peer, tag);
    return t;
  }
};

}  // namespace

struct Pipeline::MicroBatches {
  std::vector<Tensor> in, targets;
  std::vector<double> weight;  // rows / the batch's rows
};

Pipeline::MicroBatches Pipeline::split_batch(const Tensor& inputs, const Tensor& targets, const char* what) const {
  const int m = schedule_.micro_batches;
  TS_CHECK(inputs.defined() && targets.defined() && inputs.dim() >= 1 && targets.dim() >= 1, what,
           ": inputs and targets must be tensors with a batch dim");
  const int64_t N = inputs.size(0);
  TS_CHECK(targets.size(0) == N, what, ": inputs have ", N, " rows but targets ", targets.size(0));
  TS_CHECK(N >= m, what, ": a batch of ", N, " rows cannot make ", m, " micro-batches");
  MicroBatches mb;
  for (int64_t i = 0, start = 0; i < m; ++i) {
    const int64_t rows = N / m + (i < N % m);
    mb.in.push_back(inputs.narrow(0, start, rows));
    mb.targets.push_back(targets.narrow(0, start, rows));
    mb.weight.push_back(static_cast<double>(rows) / static_cast<double>(N));
    start += rows;
  }
  return mb;
}

Tensor Pipeline::evaluate(const Tensor& inputs, const Tensor& targets) {
  const int S = schedule_.stages();
  MicroBatches mb = split_batch(inputs, targets, "Pipeline::evaluate");
  NoGradGuard no_grad;
  Transfers io{*group_, {}, {}, {}};
  double loss_sum = 0;
  // Micro-batch by micro-batch, each rank's stages in order: every stage's
  // input comes from a lower stage, so the ranks never wait in a circle.
  for (int i = 0; i < schedule_.micro_batches; ++i)
    for (int s : local_stages()) {
      Tensor x = s == 0 ? mb.in[i] : io.recv(schedule_.rank_of(s - 1), 2 * (s - 1));
      Tensor y = run_stage(s, x);
      if (s == S - 1)
        loss_sum += loss_(y, mb.targets[i]).to(DType::F64).item<double>() * mb.weight[i];
      else
        io.send(y, schedule_.rank_of(s + 1), 2 * s);
    }
  for (const WorkPtr& w : io.works) w->wait();
  Tensor loss = tensor(std::vector<double>{loss_sum}, {1});
  group_->broadcast(loss, schedule_.rank_of(S - 1))->wait();
  return loss.reshape({});
}

Tensor Pipeline::step(const Tensor& inputs, const Tensor& targets, double scale) {
  const int S = schedule_.stages(), me = group_->rank();
  MicroBatches mb = split_batch(inputs, targets, "Pipeline::step");
  const std::vector<Tensor>& micro_in = mb.in;
  const std::vector<Tensor>& micro_t = mb.targets;
  const std::vector<double>& weight = mb.weight;

  Transfers io{*group_, {}, {}, {}};
  std::map<std::pair<int, int>, Tensor> in, out, grad_out;
  double loss_sum = 0;
  for (const PipeAction& a : schedule_.actions[me]) {
    const auto key = std::pair{a.stage, a.micro};
    switch (a.op) {
      case PipeOp::kRecvActivation: {
        Tensor x = io.recv(schedule_.rank_of(a.stage - 1), 2 * (a.stage - 1));
        if (is_floating(x.dtype())) x = x.detach().requires_grad_();
        in[key] = x;
        break;
      }
      case PipeOp::kForward: {
        Tensor y = run_stage(a.stage, a.stage == 0 ? micro_in[a.micro] : in.at(key));
        if (a.stage == S - 1) {
          Tensor l = ops::mul(loss_(y, micro_t[a.micro]), weight[a.micro]);
          loss_sum += l.detach().to(DType::F64).item<double>();
          y = scale == 1.0 ? l : ops::mul(l, scale);
        }
        out[key] = y;
        break;
      }
      case PipeOp::kSendActivation:
        io.send(out.at(key).detach(), schedule_.rank_of(a.stage + 1), 2 * a.stage);
        break;
      case PipeOp::kRecvGrad:
        grad_out[key] = io.recv(schedule_.rank_of(a.stage + 1), 2 * (a.stage + 1) + 1);
        break;
      case PipeOp::kBackward: {
        Tensor y = out.at(key);
        if (a.stage == S - 1) {
          autograd::backward({y});
        } else if (y.requires_grad()) {
          autograd::backward({y}, {grad_out.at(key)});
        }
        out.erase(key);
        grad_out.erase(key);
        break;
      }
      case PipeOp::kSendGrad: {
        const Tensor& x = in.at(key);
        Tensor g = x.requires_grad() && x.grad().defined() ? x.grad() : zeros_like(x);
        io.send(g, schedule_.rank_of(a.stage - 1), 2 * a.stage + 1);
        in.erase(key);
        break;
      }
    }
  }
  for (const WorkPtr& w : io.works) w->wait();
  if (tied_group_ && tied_.requires_grad()) {
    if (!tied_.grad().defined()) tied_.set_grad(zeros_like(tied_));
    tied_group_->allreduce(tied_.grad())->wait();
  }

  // The batch's loss, from the last stage's rank to every rank.
  Tensor loss = tensor(std::vector<double>{loss_sum}, {1});
  group_->broadcast(loss, schedule_.rank_of(S - 1))->wait();
  return loss.reshape({});
}

}  // namespace tessera::distributed
