#include "emulator/cm/cm_settings.h"

namespace iwemu::cm {

RtrTypes rtr_types_from_list(std::string_view list)
{
    RtrTypes t;
    t.zero_length_send = t.zero_length_write = t.zero_length_read = false;
    size_t ranked = 0;
    auto rank = [&](RtrType type, bool& flag) {
        if (flag) return;  // named twice: the first place counts
        flag = true;
        // Move `type` to position `ranked`, keeping the others' order.
        auto it = t.preference.begin();
        while (*it != type) ++it;
        for (; it != t.preference.begin() + ranked; --it) *it = *(it - 1);
        t.preference[ranked++] = type;
    };
    while (!list.empty()) {
        const size_t comma = list.find(',');
        std::string_view item = list.substr(0, comma);
        while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
        while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
        if (item == "read") rank(RtrType::zero_length_read, t.zero_length_read);
        else if (item == "write") rank(RtrType::zero_length_write, t.zero_length_write);
        else if (item == "send") rank(RtrType::zero_length_send, t.zero_length_send);
        if (comma == std::string_view::npos) break;
        list.remove_prefix(comma + 1);
    }
    return t;
}

}  // namespace iwemu::cm
