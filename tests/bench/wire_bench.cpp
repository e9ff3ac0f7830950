// Wire codec throughput: CRC-32C, FPDU encode (zero-copy gather layout and
// contiguous copy), FPDU receive (push mode), each with CRC and markers on
// and off, for 64 B, 4 KiB and 64 KiB messages.  A "message" of N payload
// octets is framed as tagged DDP segments of at most MULPDU (64768) octets:
// 64 KiB takes two FPDUs.  Figures are payload bytes per second.
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "emulator/wire/crc32c.h"
#include "emulator/wire/fpdu.h"
#include "emulator/wire/fpdu_receiver.h"

namespace iwemu::wire {
namespace {

constexpr size_t segment_payload_max = mpa_mulpdu_max - ddp_tagged_header_size;

std::vector<uint8_t> pattern(size_t n)
{
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + 7);
    return v;
}

std::array<uint8_t, ddp_tagged_header_size> write_header(bool last)
{
    std::array<uint8_t, ddp_tagged_header_size> h{};
    h[0] = static_cast<uint8_t>(0x81 | (last ? 0x40 : 0));  // T, L, DV 1
    h[1] = 0x40;                                            // RDMA Write
    return h;
}

// The message framed as FPDUs starting at stream offset 0.
std::vector<uint8_t> framed_message(const std::vector<uint8_t>& payload, FpduFraming framing)
{
    std::vector<uint8_t> stream;
    uint32_t offset = 0;
    for (size_t pos = 0; pos < payload.size() || (payload.empty() && pos == 0);) {
        const size_t n = std::min(segment_payload_max, payload.size() - pos);
        const auto header = write_header(pos + n == payload.size());
        std::vector<uint8_t> fpdu(mpa_fpdu_wire_length(header.size() + n, framing.markers, offset));
        encode_fpdu(fpdu, header, std::span(payload).subspan(pos, n), offset, framing);
        offset += static_cast<uint32_t>(fpdu.size());
        stream.insert(stream.end(), fpdu.begin(), fpdu.end());
        pos += n;
        if (n == 0) break;
    }
    return stream;
}

void BM_Crc32c(benchmark::State& state)
{
    const auto buf = pattern(static_cast<size_t>(state.range(0)));
    for (auto _ : state) benchmark::DoNotOptimize(crc32c(buf));
    state.SetBytesProcessed(int64_t(state.iterations()) * state.range(0));
}
BENCHMARK(BM_Crc32c)->Arg(4)->Arg(16)->Arg(64)->Arg(500)->Arg(4096)->Arg(65536);

// Zero-copy TX: lay out iovecs and compute the CRC (what the engine does
// before writev()).
void BM_FpduGather(benchmark::State& state)
{
    const auto payload = pattern(static_cast<size_t>(state.range(0)));
    const FpduFraming framing{state.range(1) != 0, state.range(2) != 0};
    FpduGather gather;
    std::vector<iovec> iov(FpduGather::max_iov(1));
    for (auto _ : state) {
        uint32_t offset = 0;
        for (size_t pos = 0; pos < payload.size();) {
            const size_t n = std::min(segment_payload_max, payload.size() - pos);
            const auto header = write_header(pos + n == payload.size());
            const std::span<const uint8_t> slices[] = {std::span(payload).subspan(pos, n)};
            gather.build(header, slices, offset, framing, iov);
            benchmark::DoNotOptimize(gather.crc());
            offset = gather.next_stream_offset();
            pos += n;
        }
    }
    state.SetBytesProcessed(int64_t(state.iterations()) * state.range(0));
}

// Contiguous encode (copies payload): control messages, tools.
void BM_FpduEncodeCopy(benchmark::State& state)
{
    const auto payload = pattern(static_cast<size_t>(state.range(0)));
    const FpduFraming framing{state.range(1) != 0, state.range(2) != 0};
    std::vector<uint8_t> out(payload.size() + 4096);
    for (auto _ : state) {
        uint32_t offset = 0;
        for (size_t pos = 0; pos < payload.size();) {
            const size_t n = std::min(segment_payload_max, payload.size() - pos);
            const auto header = write_header(pos + n == payload.size());
            offset += static_cast<uint32_t>(
                encode_fpdu(out, header, std::span(payload).subspan(pos, n), offset, framing));
            pos += n;
        }
        benchmark::DoNotOptimize(out.data());
    }
    state.SetBytesProcessed(int64_t(state.iterations()) * state.range(0));
}

struct CountingSink {
    size_t payload = 0;
    size_t segments = 0;
    bool error = false;
    void on_segment_header(std::span<const uint8_t>, uint16_t) {}
    void on_payload(std::span<const uint8_t> f, uint32_t) { payload += f.size(); }
    void on_segment_end() { ++segments; }
    void on_error(const FpduRxError&) { error = true; }
};

// Push-mode receive of the whole message as one chunk (as recv() hands it).
void BM_FpduReceive(benchmark::State& state)
{
    const auto payload = pattern(static_cast<size_t>(state.range(0)));
    const FpduFraming framing{state.range(1) != 0, state.range(2) != 0};
    const auto stream = framed_message(payload, framing);
    FpduReceiverOptions opt;
    opt.crc = framing.crc;
    opt.markers = framing.markers;
    FpduReceiver rx(opt);
    CountingSink sink;
    for (auto _ : state) {
        rx.reset(opt);
        rx.feed(stream, sink);
    }
    if (sink.error || sink.payload != payload.size() * state.iterations())
        state.SkipWithError("receiver rejected the stream");
    state.SetBytesProcessed(int64_t(state.iterations()) * state.range(0));
}

void framing_args(benchmark::internal::Benchmark* b)
{
    b->ArgNames({"bytes", "crc", "markers"});
    for (int64_t size : {64, 4096, 65536})
        for (int crc : {1, 0})
            for (int markers : {0, 1}) b->Args({size, crc, markers});
}
BENCHMARK(BM_FpduGather)->Apply(framing_args);
BENCHMARK(BM_FpduEncodeCopy)->Apply(framing_args);
BENCHMARK(BM_FpduReceive)->Apply(framing_args);

}  // namespace
}  // namespace iwemu::wire

BENCHMARK_MAIN();
