// graphbandit-loadgen's completion queue and the threads that drain it: every call the load
// generator makes is asynchronous, and its answer is handled on one of these threads.
#ifndef GRAPHBANDIT_CLIENT_LOADTEST_COMPLETION_THREADS_H_
#define GRAPHBANDIT_CLIENT_LOADTEST_COMPLETION_THREADS_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

namespace graphbandit::loadtest {

// A thread blocked in Next() is also one that polls the sockets, so with one thread an answer
// is handled where it arrived. gRPC's callback client API (used before) hands every completion
// from the polling thread to another one: about one more context switch per call, and CPU that
// on a two-core machine is taken from the server under test.
class CompletionThreads {
 public:
  explicit CompletionThreads(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Drain(); });
  }
  ~CompletionThreads() {
    cq_.Shutdown();
    for (std::thread& t : threads_) t.join();
  }
  CompletionThreads(const CompletionThreads&) = delete;
  CompletionThreads& operator=(const CompletionThreads&) = delete;

  grpc::CompletionQueue* cq() { return &cq_; }

  // Starts a call prepared on cq() (a stub's PrepareAsyncX); `done` runs on one of the threads
  // with the call's status once `response` holds the answer.
  template <typename Response>
  void Start(std::unique_ptr<grpc::ClientAsyncResponseReader<Response>> reader, Response* response,
             std::function<void(const grpc::Status&)> done) {
    auto* tag = new CallTag<Response>;
    tag->done = std::move(done);
    tag->reader = std::move(reader);  // kept until the call completes
    tag->reader->StartCall();
    tag->reader->Finish(response, &tag->status, tag);
  }

 private:
  struct Tag {
    virtual ~Tag() = default;
    // The reader lives in the call's arena, which `done` may free (it deletes the call's
    // ClientContext): the reader goes first.
    virtual void DropReader() = 0;
    grpc::Status status;
    std::function<void(const grpc::Status&)> done;
  };
  template <typename Response>
  struct CallTag : Tag {
    void DropReader() override { reader.reset(); }
    std::unique_ptr<grpc::ClientAsyncResponseReader<Response>> reader;
  };
  void Drain() {
    void* tag = nullptr;
    bool ok = false;
    while (cq_.Next(&tag, &ok)) {
      auto* t = static_cast<Tag*>(tag);
      t->DropReader();
      t->done(t->status);  // a client Finish always completes with ok; the status says how
      delete t;
    }
  }
  grpc::CompletionQueue cq_;
  std::vector<std::thread> threads_;
};

}  // namespace graphbandit::loadtest

#endif  // GRAPHBANDIT_CLIENT_LOADTEST_COMPLETION_THREADS_H_
