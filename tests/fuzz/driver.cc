// A randomized driver for the fuzz targets, for compilers without libFuzzer (gcc): it feeds the
// target random byte strings and mutations of the target's seed inputs (bit flips, byte
// changes, truncation, insertion, deletion, splicing two inputs), for a bounded number of
// iterations and a bounded time, and reports what it ran. With clang, configure with
// -DGRAPHBANDIT_LIBFUZZER=ON to build the same targets as coverage-guided libFuzzer binaries.
//
// usage: FUZZER [--iterations=N] [--seconds=S] [--seed=X] [--max_len=BYTES]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace graphbandit::fuzz {
// Defined by targets that have seed inputs; a weak default for the others.
std::vector<std::string> FuzzSeeds() __attribute__((weak));
}  // namespace graphbandit::fuzz

namespace {

long Flag(int argc, char** argv, const char* name, long fallback) {
  const size_t n = std::strlen(name);
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], name, n) == 0 && argv[i][n] == '=') return std::atol(argv[i] + n + 1);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const long iterations = Flag(argc, argv, "--iterations", 2000);
  const long seconds = Flag(argc, argv, "--seconds", 60);
  const uint64_t seed = static_cast<uint64_t>(Flag(argc, argv, "--seed", 1));
  const size_t max_len = static_cast<size_t>(Flag(argc, argv, "--max_len", 4096));
  std::mt19937_64 rng(seed);
  std::vector<std::string> corpus;
  if (graphbandit::fuzz::FuzzSeeds != nullptr) corpus = graphbandit::fuzz::FuzzSeeds();
  const size_t seeds = corpus.size();
  auto below = [&rng](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };

  const auto start = std::chrono::steady_clock::now();
  long ran = 0;
  size_t bytes = 0;
  for (; ran < iterations; ++ran) {
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(seconds)) break;
    std::string input;
    if (corpus.empty() || rng() % 4 == 0) {
      input.resize(below(max_len));
      for (char& c : input) c = static_cast<char>(rng());
    } else {
      input = corpus[below(corpus.size())];
      const int mutations = 1 + static_cast<int>(below(3));
      for (int m = 0; m < mutations; ++m) {
        switch (below(6)) {
          case 0:
            if (!input.empty()) input[below(input.size())] ^= static_cast<char>(1 << below(8));
            break;
          case 1:
            if (!input.empty()) input[below(input.size())] = static_cast<char>(rng());
            break;
          case 2:
            input.resize(below(input.size() + 1));
            break;
          case 3: {
            std::string insert(1 + below(16), '\0');
            for (char& c : insert) c = static_cast<char>(rng());
            input.insert(below(input.size() + 1), insert);
            break;
          }
          case 4:
            if (!input.empty()) {
              const size_t at = below(input.size());
              input.erase(at, 1 + below(16));
            }
            break;
          default: {
            const std::string& other = corpus[below(corpus.size())];
            const size_t cut = below(input.size() + 1);
            input = input.substr(0, cut) + other.substr(below(other.size() + 1));
            break;
          }
        }
      }
      if (input.size() > max_len * 4) input.resize(max_len * 4);
    }
    bytes += input.size();
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: %ld inputs (%zu seed inputs, %zu bytes in all, seed %llu) in %.1f s; no crash\n",
              argv[0], ran, seeds, bytes, static_cast<unsigned long long>(seed), elapsed);
  return 0;
}
