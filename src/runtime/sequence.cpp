#include "runtime/sequence.h"

#include "graph/forward.h"
#include "runtime/engine.h"
#include "runtime/inputs.h"

#include <ggml-alloc.h>
#include <ggml-backend.h>

#include <memory>

namespace toy {

std::vector<float> eval_sequence(const Model &model, std::span<const int32_t> tokens, int n_threads,
                                 const graph::Adapters *adapters) {
    const Config &c = model.config();
    const int64_t T = (int64_t)tokens.size();
    check_tokens(model, tokens, 0);
    if (model.split().offloads()) fail("eval_sequence runs on the CPU only; this model is split across devices (use a Session)");
    const size_t graph_size = graph::forward_graph_size(c, adapters);
    ggml_init_params ip{ggml_tensor_overhead() * graph_size + ggml_graph_overhead_custom(graph_size, false), nullptr,
                        true};
    std::unique_ptr<ggml_context, decltype(&ggml_free)> ctx(ggml_init(ip), ggml_free);
    ggml_cgraph *gf = ggml_new_graph_custom(ctx.get(), graph_size, false);
    graph::ForwardParams p;
    p.n_tokens = T;
    p.n_outputs = T;
    p.adapters = adapters;
    graph::ForwardGraph g = graph::build_forward(ctx.get(), gf, model, p);

    const Engine engine(n_threads);
    InputBuffer inputs;
    inputs.place(engine.buffer_type(), g.inputs());
    std::unique_ptr<ggml_gallocr, decltype(&ggml_gallocr_free)> alloc(ggml_gallocr_new(engine.buffer_type()), ggml_gallocr_free);
    if (!ggml_gallocr_alloc_graph(alloc.get(), gf)) fail("could not allocate the sequence graph ({} tokens)", T);

    std::vector<int32_t> pos(T);
    for (int64_t i = 0; i < T; ++i) pos[i] = (int32_t)i;
    set_forward_inputs(g, c, tokens, pos);
    if (ggml_backend_graph_compute(engine.backend(), gf) != GGML_STATUS_SUCCESS) fail("graph computation failed");
    std::vector<float> logits((size_t)T * c.n_vocab);
    ggml_backend_tensor_get(g.logits, logits.data(), 0, logits.size() * sizeof(float));
    return logits;
}

}  // namespace toy
