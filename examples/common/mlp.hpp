// A two-layer perceptron with hand-written forward and backward passes, learning a fixed
// "teacher" network from synthetic data, with gradient accumulation; the trainer examples and
// the exact-resume test share it. Everything is deterministic: the data of micro-batch n is a
// function of (seed, n) alone, so the step counter is the only data-loader state.
#pragma once

#include <ruda/optim/gradients_params.hpp>
#include <ruda/optim/gradients_params_record.hpp>
#include <ruda/optim/param_id.hpp>
#include <ruda/optim/record_serialization.hpp>
#include <ruda/tensor/tensor_data.hpp>

#include <cereal/types/array.hpp>
#include <cereal/types/vector.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace mlp {

struct config {
    std::size_t inputs = 32;
    std::size_t hidden = 256;
    std::size_t outputs = 8;
    std::size_t batch = 32;         ///< samples per micro-batch
    std::size_t accumulate = 4;     ///< micro-batches per optimizer step
    float learning_rate = 0.05F;
    std::uint64_t seed = 2026;
};

/// A parameter: its id (the gradient's key), shape, values, and accumulated gradient.
struct parameter {
    std::uint64_t id = 0;
    std::vector<std::size_t> shape;
    std::vector<float> value;
    std::vector<float> grad;

    template <class Archive>
    void serialize(Archive& ar)
    {
        ar(CEREAL_NVP(id), CEREAL_NVP(shape), CEREAL_NVP(value)); // grad travels as a record
    }
};

/// w1 [hidden x inputs], b1 [hidden], w2 [outputs x hidden], b2 [outputs].
struct model {
    std::array<parameter, 4> params;
    /// The parameters' names, as a torch model's named_parameters() would give them: they
    /// travel with each gradient into checkpoints, `ruda-inspect` and safetensors exports.
    static constexpr std::array<const char*, 4> names{"fc1.weight", "fc1.bias", "fc2.weight",
                                                      "fc2.bias"};

    parameter& w1() { return params[0]; }
    parameter& b1() { return params[1]; }
    parameter& w2() { return params[2]; }
    parameter& b2() { return params[3]; }
    const parameter& w1() const { return params[0]; }
    const parameter& b1() const { return params[1]; }
    const parameter& w2() const { return params[2]; }
    const parameter& b2() const { return params[3]; }

    template <class Archive>
    void serialize(Archive& ar)
    {
        ar(CEREAL_NVP(params));
    }
};

/// Where training stands: optimizer steps completed, and micro-batches accumulated since.
struct position {
    std::uint64_t step = 0;
    std::uint64_t micro_batch = 0;

    friend bool operator==(const position&, const position&) = default;

    template <class Archive>
    void serialize(Archive& ar)
    {
        ar(CEREAL_NVP(step), CEREAL_NVP(micro_batch));
    }
};

/// What a trainer saves to resume exactly: where it stands, the weights with their ids, and
/// the accumulated gradients of the unfinished window.
struct training_state {
    position at;
    model weights;
    ruda::gradients_params_record gradients;

    template <class Archive>
    void serialize(Archive& ar)
    {
        ar(CEREAL_NVP(at), CEREAL_NVP(weights), CEREAL_NVP(gradients));
    }
};

namespace detail {

inline std::uint64_t mix(std::uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30U)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27U)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31U);
}

// A uniform value in [-1, 1) from (seed, stream, index).
inline float uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t index)
{
    const std::uint64_t bits = mix(seed ^ mix(stream * 0x100000001b3ULL + index));
    return static_cast<float>(static_cast<double>(bits >> 11U) * 0x1.0p-52 - 1.0);
}

inline parameter make_parameter(std::vector<std::size_t> shape, std::uint64_t seed,
                                std::uint64_t stream, float scale)
{
    std::size_t n = 1;
    for (const std::size_t d : shape) {
        n *= d;
    }
    parameter p{ruda::param_id::generate().val(), std::move(shape), std::vector<float>(n),
                std::vector<float>(n, 0.0F)};
    for (std::size_t i = 0; i < n; ++i) {
        p.value[i] = scale * uniform(seed, stream, i);
    }
    return p;
}

// y = w2 tanh(w1 x + b1) + b2 for one sample; `hidden` receives the activations.
inline void forward(const config& c, const model& m, const float* x, float* hidden, float* y)
{
    for (std::size_t h = 0; h < c.hidden; ++h) {
        float sum = m.b1().value[h];
        const float* row = &m.w1().value[h * c.inputs];
        for (std::size_t i = 0; i < c.inputs; ++i) {
            sum += row[i] * x[i];
        }
        hidden[h] = std::tanh(sum);
    }
    for (std::size_t o = 0; o < c.outputs; ++o) {
        float sum = m.b2().value[o];
        const float* row = &m.w2().value[o * c.hidden];
        for (std::size_t h = 0; h < c.hidden; ++h) {
            sum += row[h] * hidden[h];
        }
        y[o] = sum;
    }
}

} // namespace detail

/// A model with fresh random parameter ids and weights drawn from `c.seed`.
inline model init(const config& c)
{
    model m;
    const float s1 = 1.0F / std::sqrt(static_cast<float>(c.inputs));
    const float s2 = 1.0F / std::sqrt(static_cast<float>(c.hidden));
    m.w1() = detail::make_parameter({c.hidden, c.inputs}, c.seed, 1, s1);
    m.b1() = detail::make_parameter({c.hidden}, c.seed, 2, 0.0F);
    m.w2() = detail::make_parameter({c.outputs, c.hidden}, c.seed, 3, s2);
    m.b2() = detail::make_parameter({c.outputs}, c.seed, 4, 0.0F);
    return m;
}

/// One micro-batch: inputs [batch x inputs] and the teacher's targets [batch x outputs].
struct batch {
    std::vector<float> x;
    std::vector<float> y;
};

/// The synthetic task: inputs uniform in [-1, 1), targets from a fixed teacher network of the
/// same shape with its own weights.
class dataset {
public:
    explicit dataset(const config& c) : config_(c)
    {
        config t = c;
        t.seed = c.seed ^ 0x7eac4e5ULL;
        teacher_ = init(t);
        for (float& b : teacher_.b1().value) {
            b = 0.5F;
        }
    }

    /// Micro-batch number `n` (counted over the whole run), always the same for one seed.
    [[nodiscard]] batch micro_batch(std::uint64_t n) const
    {
        const config& c = config_;
        batch b{std::vector<float>(c.batch * c.inputs), std::vector<float>(c.batch * c.outputs)};
        std::vector<float> hidden(c.hidden);
        for (std::size_t s = 0; s < c.batch; ++s) {
            float* x = &b.x[s * c.inputs];
            for (std::size_t i = 0; i < c.inputs; ++i) {
                x[i] = detail::uniform(c.seed, 100 + n, s * c.inputs + i);
            }
            detail::forward(c, teacher_, x, hidden.data(), &b.y[s * c.outputs]);
        }
        return b;
    }

private:
    config config_;
    model teacher_;
};

/// Adds the gradient of this micro-batch's loss, 0.5 * mean over samples of |y - target|^2,
/// into every parameter's `grad`; returns the loss. `b` may hold part of a micro-batch (a
/// data-parallel rank's share): the mean is still over the `c.batch` samples of the whole.
inline float accumulate_gradients(const config& c, model& m, const batch& b)
{
    const std::size_t samples = b.y.size() / c.outputs;
    std::vector<float> hidden(c.hidden);
    std::vector<float> y(c.outputs);
    std::vector<float> dy(c.outputs);
    std::vector<float> dpre(c.hidden);
    const float inv_batch = 1.0F / static_cast<float>(c.batch);
    float loss = 0;
    for (std::size_t s = 0; s < samples; ++s) {
        const float* x = &b.x[s * c.inputs];
        detail::forward(c, m, x, hidden.data(), y.data());
        for (std::size_t o = 0; o < c.outputs; ++o) {
            const float diff = y[o] - b.y[s * c.outputs + o];
            loss += 0.5F * diff * diff * inv_batch;
            dy[o] = diff * inv_batch;
        }
        // Output layer, then back through tanh into the first layer.
        for (std::size_t h = 0; h < c.hidden; ++h) {
            dpre[h] = 0;
        }
        for (std::size_t o = 0; o < c.outputs; ++o) {
            m.b2().grad[o] += dy[o];
            float* grad_row = &m.w2().grad[o * c.hidden];
            const float* row = &m.w2().value[o * c.hidden];
            for (std::size_t h = 0; h < c.hidden; ++h) {
                grad_row[h] += dy[o] * hidden[h];
                dpre[h] += row[h] * dy[o];
            }
        }
        for (std::size_t h = 0; h < c.hidden; ++h) {
            const float d = dpre[h] * (1.0F - hidden[h] * hidden[h]);
            m.b1().grad[h] += d;
            float* grad_row = &m.w1().grad[h * c.inputs];
            for (std::size_t i = 0; i < c.inputs; ++i) {
                grad_row[i] += d * x[i];
            }
        }
    }
    return loss;
}

/// Plain SGD on the mean of the accumulated gradients, which are then cleared.
inline void sgd_step(const config& c, model& m)
{
    const float scale = c.learning_rate / static_cast<float>(c.accumulate);
    for (parameter& p : m.params) {
        for (std::size_t i = 0; i < p.value.size(); ++i) {
            p.value[i] -= scale * p.grad[i];
            p.grad[i] = 0;
        }
    }
}

/// Accumulates the micro-batch at `at`, takes the optimizer step when that completes the
/// window, and advances `at`. Returns the micro-batch's loss.
inline float train_micro_batch(const config& c, const dataset& data, model& m, position& at)
{
    const float loss =
        accumulate_gradients(c, m, data.micro_batch(at.step * c.accumulate + at.micro_batch));
    if (++at.micro_batch == c.accumulate) {
        sgd_step(c, m);
        ++at.step;
        at.micro_batch = 0;
    }
    return loss;
}

/// Registers every accumulated gradient in `grads` as a tensor of backend `B` on `device`,
/// replacing the previous one (tensors are immutable; a snapshot keeps what it captured).
template <ruda::backend B>
void publish_gradients(const model& m, ruda::gradients_params& grads,
                       const typename B::device& device)
{
    for (std::size_t k = 0; k < m.params.size(); ++k) {
        const parameter& p = m.params[k];
        auto data = ruda::tensor_data::from_values(p.grad, ruda::shape(p.shape)).value();
        grads.insert<B>(ruda::param_id{p.id}, B::float_from_data(std::move(data), device).value(),
                        model::names[k]);
    }
}

/// Copies a record's gradients into the parameters with the same ids. False if the record
/// does not hold exactly one f32 gradient of the right size for each parameter.
inline bool load_gradients(const ruda::gradients_params_record& record, model& m)
{
    if (record.entries().size() != m.params.size()) {
        return false;
    }
    for (parameter& p : m.params) {
        bool found = false;
        for (const ruda::gradient_entry& e : record.entries()) {
            if (e.id != ruda::param_id{p.id}) {
                continue;
            }
            auto values = e.data.values<float>();
            if (!values || values.value().size() != p.value.size()) {
                return false;
            }
            p.grad.assign(values.value().begin(), values.value().end());
            found = true;
        }
        if (!found) {
            return false;
        }
    }
    return true;
}

/// Whether both models hold bit-identical weights (NaNs and signed zeros included).
inline bool same_bits(const model& a, const model& b)
{
    for (std::size_t k = 0; k < a.params.size(); ++k) {
        const auto& x = a.params[k].value;
        const auto& y = b.params[k].value;
        if (x.size() != y.size() ||
            (!x.empty() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) != 0)) {
            return false;
        }
    }
    return true;
}

/// Whether both models hold the same parameters with bit-identical gradients.
inline bool same_gradients(const model& a, const model& b)
{
    for (std::size_t k = 0; k < a.params.size(); ++k) {
        const auto& x = a.params[k].grad;
        const auto& y = b.params[k].grad;
        if (a.params[k].id != b.params[k].id || x.size() != y.size() ||
            std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) != 0) {
            return false;
        }
    }
    return true;
}

} // namespace mlp
