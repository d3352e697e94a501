/* ebb-xdp's XDP program: every frame on a queue whose AF_XDP socket is in `xsks` goes to
 * that socket; frames on other queues go on to Linux (XDP_PASS).
 * Built (by hand, not by cargo; the object is committed): see build.sh beside this file. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");
SEC("xdp")
int xsk_redirect(struct xdp_md *ctx)
{
	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}
char _license[] SEC("license") = "Dual BSD/GPL";
