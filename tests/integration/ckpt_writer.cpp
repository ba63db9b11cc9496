// ckpt_writer: a minimal trainer's checkpointing, for tests/integration/provenance.sh. It
// saves through libsaker_ckpt exactly as saker-train and saker.torch do, so what the
// checkpoints record of their job comes from the library alone (SAKER_ATTESTATION et al.).
//
//   ckpt_writer DIR STEP [--resume] [--from FILE] [--lineage LIST]
//     --resume      load the newest checkpoint in DIR first (a requeued job)
//     --from FILE   load FILE first (a fine-tune from another run's checkpoint)
// Prints "saved FILE".
#include <cstdio>
#include <cstring>
#include <string>

#include "saker/ckpt.hpp"

int main(int argc, char** argv) {
  using namespace saker::ckpt;
  if (argc < 3) {
    std::fprintf(stderr, "usage: ckpt_writer DIR STEP [--resume] [--from FILE] [--lineage LIST]\n");
    return 2;
  }
  try {
    Checkpointer ck(argv[1]);
    State st;
    st.step = std::stoull(argv[2]);
    st.config = "{\"lr\": 0.01}";
    for (int i = 3; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--resume") {
        if (!ck.load_latest()) std::fprintf(stderr, "ckpt_writer: nothing to resume in %s\n", argv[1]);
      } else if (a == "--from" && i + 1 < argc) {
        ck.load(argv[++i]);
      } else if (a == "--lineage" && i + 1 < argc) {
        st.lineage = parse_lineage(argv[++i]);
      } else {
        std::fprintf(stderr, "ckpt_writer: unknown argument %s\n", a.c_str());
        return 2;
      }
    }
    std::vector<float> w(256, static_cast<float>(st.step));
    st.tensors.push_back(Tensor::owning("w", DType::f32, {256},
                                        std::vector<std::byte>(reinterpret_cast<std::byte*>(w.data()),
                                                               reinterpret_cast<std::byte*>(w.data() + w.size()))));
    std::printf("saved %s\n", ck.save(st).file.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ckpt_writer: %s\n", e.what());
    return 1;
  }
}
