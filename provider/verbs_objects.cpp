#include "provider/provider.h"

namespace iwemu::provider {

const verbs_context_ops kObjectOps = [] {
    verbs_context_ops ops{};
    return ops;
}();

}  // namespace iwemu::provider
