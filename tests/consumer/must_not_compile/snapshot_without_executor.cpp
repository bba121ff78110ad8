// expect: the completion token has none
// A plain callback names no executor: the snapshot would run on Asio's system pool, so it is
// refused at compile time; async_snapshot<B>(io.get_executor(), grads, callback) is the way.
#include <ruda/ruda.hpp>

int main()
{
    const ruda::gradients_params grads;
    ruda::async_snapshot<ruda::cpu_backend>(grads, [](ruda::result<ruda::gradients_params_record>) {});
}
