// _core.Loader: the C++ Loader behind a blocking, interruptible next().
//
// Loader::next() may block for as long as a download takes, and has no
// timeout, so one helper thread (started at the first next(), never at
// import or construction: a process may fork until then) calls it while the
// Python thread waits in short slices without the GIL, checking for signals
// in between. A Ctrl-C thus raises KeyboardInterrupt at once; the batch that
// was being fetched is kept and returned by the following next().
//
// Batches reach Python without a copy: every fixed-shape tensor is a NumPy
// array over the pool slot whose base is a capsule holding a copy of the
// Batch, so the slot returns to the pool only when the last array (or torch
// tensor made from it) is gone, also after the loader is closed.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <unistd.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>

#include "interruptible.h"
#include "loader_options.h"
#include "shardstream/loader.h"
#include "status_to_exception.h"
#include "transfer.h"

namespace py = pybind11;

namespace shardstream::python {
namespace {

py::dict StatsToDict(const LoaderStats& s) {
  py::dict d;
  d["epoch"] = s.epoch;
  d["batches"] = s.batches;
  d["samples"] = s.samples;
  d["bytes"] = s.bytes;
  d["seconds"] = s.seconds;
  d["batches_per_s"] = s.batches_per_s;
  d["samples_per_s"] = s.samples_per_s;
  d["bytes_per_s"] = s.bytes_per_s;
  d["read_bytes"] = s.read_bytes;
  d["wait_bucket_us"] = s.wait_bucket_us;
  d["wait_counts"] = s.wait_counts;
  d["wait_seconds"] = s.wait_seconds;
  d["wait_p50_us"] = s.wait_p50_us;
  d["wait_p99_us"] = s.wait_p99_us;
  d["queue_depth"] = s.queue_depth;
  d["queue_capacity"] = s.queue_capacity;
  d["shuffle_fill"] = s.shuffle_fill;
  d["shuffle_capacity"] = s.shuffle_capacity;
  d["cache_hit_rate"] = s.cache_hit_rate;
  d["cache_hits"] = s.cache_hits;
  d["cache_opens"] = s.cache_opens;
  d["stream_samples"] = s.stream_samples;
  d["skipped_samples"] = s.skipped_samples;
  d["skipped_shards"] = s.skipped_shards;
  d["cut_samples"] = s.cut_samples;
  d["cut_tokens"] = s.cut_tokens;
  d["direct_samples"] = s.direct_samples;
  d["mapped_kept_bytes"] = s.mapped_kept_bytes;
  d["memory_kind"] = std::string(HostMemoryKindName(s.memory_kind));
  d["slot_bytes"] = s.slot_bytes;
  d["slots"] = s.slots;
  d["heap_spills"] = s.heap_spills;
  d["copy_waits"] = s.copy_waits;
  d["reader_wait_seconds"] = s.reader_wait_seconds;
  d["caller_wait_seconds"] = s.caller_wait_seconds;
  d["waiting_seconds"] = s.waiting_seconds;
  d["watchdog_reports"] = s.watchdog_reports;
  d["watchdog_report"] = s.watchdog_report;
  // The process's remote reads (every loader and cache of it together).
  d["transfer"] = TransferStatsToDict(GetTransferStats());
  return d;
}

// Python objects for one batch: (tensors, keys, urls, info). REQUIRES: GIL.
py::tuple BatchToPython(Batch batch) {
  auto* held = new Batch(std::move(batch));
  py::capsule base(held, "shardstream.Batch", [](void* p) { delete static_cast<Batch*>(p); });
  const Batch& b = *held;
  py::dict tensors;
  py::list bf16;
  py::dict ragged;
  for (size_t i = 0; i < b.num_tensors(); ++i) {
    TensorView t = b.tensor(i);
    py::str name(t.name.data(), t.name.size());
    if (t.ragged != Ragged::kError) {
      // A list of arrays viewing the slot, each with its row's shape.
      TensorView shapes = b.tensor(std::string(t.name) + ".shape");
      const auto* dims = static_cast<const int64_t*>(shapes.data);
      const int nd = t.ndim - 1;
      py::dtype dt(std::string(t.dtype == DType::kBFloat16 ? std::string_view("<u2") : DTypeCode(t.dtype)));
      py::list rows(t.shape[0]);
      for (int64_t r = 0; r < t.shape[0]; ++r) {
        std::string_view v = t.bytes(r);
        std::vector<py::ssize_t> shape(dims + r * nd, dims + (r + 1) * nd);
        rows[r] = py::array(dt, shape, v.data(), base);
      }
      tensors[name] = rows;
      ragged[name] = t.ragged == Ragged::kPad ? "pad" : "list";
      if (t.dtype == DType::kBFloat16) bf16.append(name);
      continue;
    }
    if (t.is_json) {
      // Parsed objects, as WebDataset's .decode() gives; None where an
      // optional field is absent (the text was checked to parse).
      static py::object* loads = new py::object(py::module_::import("json").attr("loads"));
      TensorView present = b.tensor(std::string(t.name) + ".present");
      const auto* has = static_cast<const bool*>(present.data);
      py::list rows(t.shape[0]);
      for (int64_t r = 0; r < t.shape[0]; ++r) {
        std::string_view v = t.bytes(r);
        rows[r] = has != nullptr && !has[r] ? py::none() : (*loads)(py::str(v.data(), v.size()));
      }
      tensors[name] = rows;
      continue;
    }
    if (t.is_bytes) {
      py::list rows(t.shape[0]);
      for (int64_t r = 0; r < t.shape[0]; ++r) {
        std::string_view v = t.bytes(r);
        if (t.is_string) rows[r] = py::str(v.data(), v.size());
        else rows[r] = py::bytes(v.data(), v.size());
      }
      tensors[name] = rows;
      continue;
    }
    std::string code(t.dtype == DType::kBFloat16 ? std::string_view("<u2") : DTypeCode(t.dtype));
    if (t.dtype == DType::kBFloat16) bf16.append(name);
    std::vector<py::ssize_t> shape(t.shape, t.shape + t.ndim);
    tensors[name] = py::array(py::dtype(code), shape, t.data, base);
  }
  int64_t n = b.num_samples();
  py::list keys(n), urls(n);
  std::unordered_map<const std::string*, py::str> url_objs;
  for (int64_t i = 0; i < n; ++i) {
    std::string_view k = b.key(i);
    keys[i] = py::str(k.data(), k.size());
    const std::string& u = b.url(i);
    auto it = url_objs.find(&u);
    if (it == url_objs.end()) it = url_objs.emplace(&u, py::str(u)).first;
    urls[i] = it->second;
  }
  py::dict info;
  info["epoch"] = b.epoch();
  info["index"] = b.index();
  info["rows"] = b.rows();
  info["bfloat16"] = bf16;
  info["ragged"] = ragged;
  info["pinned"] = b.memory_kind() == HostMemoryKind::kCudaPinned;
  return py::make_tuple(tensors, keys, urls, info);
}

class PyLoader {
 public:
  explicit PyLoader(const py::dict& options) : pid_(getpid()) {
    LoaderOptions o = LoaderOptionsFromDict(options);
    std::optional<Result<std::unique_ptr<Loader>>> r;
    {
      py::gil_scoped_release release;
      r.emplace(Loader::Create(std::move(o)));
    }
    loader_ = ValueOrThrow(std::move(*r));
  }

  ~PyLoader() {
    if (getpid() != pid_) {
      // A forked copy: the threads exist only in the parent, and their
      // mutexes may have been held at the fork. Touch nothing; leak.
      (void)st_.release();
      return;
    }
    py::gil_scoped_release release;
    StopLocked();
  }

  // The next batch as (tensors, keys, urls, info), or None at the end of the
  // epoch.
  py::object Next() {
    CheckProcess();
    std::optional<Result<Batch>> r;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) {
        py::gil_scoped_acquire acquire;
        ThrowStatus(Status(StatusCode::kCancelled, "the loader is closed"));
      }
      if (!want_ && !result_ && fetcher_ && loader_->ready()) {
        // A batch is waiting (the usual case, the pipeline running ahead):
        // take it on this thread. The hand-off through the fetcher costs two
        // thread wake-ups, half a millisecond per batch on a machine whose
        // cores are busy decoding.
        r.emplace(loader_->next());
      } else {
        if (!fetcher_) fetcher_ = std::make_unique<std::thread>([this] { FetchLoop(); });
        if (!want_ && !result_) {
          want_ = true;
          cv_.notify_all();
        }
      }
    }
    if (!r)
      InterruptibleWait(mu_, cv_, [this] { return result_.has_value(); },
                        [&] { r.swap(result_); });
    Batch batch = ValueOrThrow(std::move(*r));
    if (batch.empty()) return py::none();
    return BatchToPython(std::move(batch));
  }

  void SetEpoch(int64_t epoch) {
    Quiesce();
    Status s;
    {
      py::gil_scoped_release release;
      s = loader_->set_epoch(epoch);
    }
    ThrowIfError(s);
  }

  int64_t Epoch() const { return loader_->epoch(); }

  std::string State() {
    Quiesce(/*keep_result=*/true);
    return ValueOrThrow(loader_->state()).ToJson();
  }

  std::string OwnState() {
    Quiesce(/*keep_result=*/true);
    return ValueOrThrow(loader_->own_state()).ToJson();
  }

  void Restore(const std::string& json) {
    LoaderState st = ValueOrThrow(LoaderState::FromJson(json));
    Quiesce();
    Status s;
    {
      py::gil_scoped_release release;
      s = loader_->restore(st);
    }
    ThrowIfError(s);
  }

  int64_t SamplesPerEpoch() const { return loader_->samples_per_epoch(); }
  int64_t BatchesPerEpoch() const { return loader_->batches_per_epoch(); }
  int64_t RankBatchesPerEpoch() const { return loader_->rank_batches_per_epoch(); }
  py::dict Stats() const { return StatsToDict(loader_->stats()); }

  void Close() {
    if (getpid() != pid_) return;
    py::gil_scoped_release release;
    StopLocked();
  }

 private:
  void CheckProcess() {
    if (getpid() != pid_ && fetcher_)
      throw std::runtime_error(
          "shardstream.Loader: this loader was started in another process (fork after "
          "iterating); create a new Loader in this process");
  }

  void FetchLoop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [this] { return want_ || stopped_; });
      if (stopped_) return;
      lock.unlock();
      Result<Batch> r = loader_->next();
      lock.lock();
      result_.emplace(std::move(r));
      want_ = false;
      cv_.notify_all();
    }
  }

  // Waits for an interrupted fetch to finish. Its batch is dropped unless
  // keep_result (then the next Next() returns it).
  void Quiesce(bool keep_result = false) {
    CheckProcess();
    InterruptibleWait(mu_, cv_, [this] { return !want_; }, [&] {
      if (!keep_result) result_.reset();
    });
  }

  // REQUIRES: the GIL is not held.
  void StopLocked() {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stopped_) return;
      stopped_ = true;
      cv_.notify_all();
      // Loader::Stop() must not run while Loader::next() does, so a fetch in
      // flight is cancelled (thread-safe, no joins) and let finish first: it
      // returns promptly with kCancelled (or a batch), which is dropped.
      if (loader_) loader_->Cancel();
      cv_.wait(lock, [this] { return !want_; });
    }
    if (loader_) loader_->Stop();
    if (fetcher_ && fetcher_->joinable()) fetcher_->join();
    std::lock_guard<std::mutex> lock(mu_);
    result_.reset();  // drops the slot of a fetched, unreturned batch
  }

  // Everything but the pid lives on the heap, so a forked copy can leak it
  // whole: even destroying a condition variable that the parent's threads
  // wait on blocks forever in the child.
  struct Shared {
    std::unique_ptr<Loader> loader;
    std::mutex mu;
    std::condition_variable cv;
    bool want = false;                    // GUARDED_BY(mu): a next() is requested or running
    bool stopped = false;                 // GUARDED_BY(mu)
    std::optional<Result<Batch>> result;  // GUARDED_BY(mu): fetched, not yet returned
    std::unique_ptr<std::thread> fetcher;
  };

  const pid_t pid_;
  std::unique_ptr<Shared> st_ = std::make_unique<Shared>();
  std::unique_ptr<Loader>& loader_ = st_->loader;
  std::mutex& mu_ = st_->mu;
  std::condition_variable& cv_ = st_->cv;
  bool& want_ = st_->want;
  bool& stopped_ = st_->stopped;
  std::optional<Result<Batch>>& result_ = st_->result;
  std::unique_ptr<std::thread>& fetcher_ = st_->fetcher;
};

}  // namespace

void RegisterLoader(py::module_& m) {
  py::class_<PyLoader>(m, "Loader", "Native loader; use shardstream.Loader instead.")
      .def(py::init<const py::dict&>(), py::arg("options"))
      .def("next", &PyLoader::Next,
           "Next batch as (tensors, keys, urls, info), or None at the end of the epoch.")
      .def("set_epoch", &PyLoader::SetEpoch, py::arg("epoch"))
      .def_property_readonly("epoch", &PyLoader::Epoch)
      .def("state", &PyLoader::State, "The delivered part of the epoch, as JSON text.")
      .def("own_state", &PyLoader::OwnState,
           "This consumer's share: the state with everything outside its plan delivered.")
      .def("restore", &PyLoader::Restore, py::arg("state_json"))
      .def("samples_per_epoch", &PyLoader::SamplesPerEpoch)
      .def("batches_per_epoch", &PyLoader::BatchesPerEpoch)
      .def("rank_batches_per_epoch", &PyLoader::RankBatchesPerEpoch)
      .def("stats", &PyLoader::Stats)
      .def("close", &PyLoader::Close, "Stops and joins the threads; idempotent.");

  m.def(
      "merge_states",
      [](const std::vector<std::string>& jsons) {
        std::vector<LoaderState> states;
        for (const std::string& j : jsons) states.push_back(ValueOrThrow(LoaderState::FromJson(j)));
        return ValueOrThrow(MergeLoaderStates(states)).ToJson();
      },
      py::arg("states"), "Joins the JSON states of one epoch's consumers into one.");
  m.def("loader_option_defaults", &LoaderOptionDefaults,
        "Every native loader option with its C++ default (None where Python builds it).");
  m.def(
      "merge_own_states",
      [](const std::vector<std::string>& jsons) {
        std::vector<LoaderState> states;
        for (const std::string& j : jsons) states.push_back(ValueOrThrow(LoaderState::FromJson(j)));
        return ValueOrThrow(MergeOwnLoaderStates(states)).ToJson();
      },
      py::arg("states"),
      "Joins the JSON own_state()s of disjoint consumers of one epoch into one (intersection).");
}

}  // namespace shardstream::python
