/*
 * xtc-forwarder: the packet-forwarding process of a lab virtual router (VR).
 *
 * A two-port L2 forwarder: every frame received on one interface is sent,
 * unchanged, out of the other, in both directions, through AF_PACKET sockets.
 * Because the work happens in this process (not in the kernel's softirq
 * path), it is charged to the VR's cgroup and a CPU cap limits the forwarded
 * packet rate, as it does for a Xen domU.
 *
 * It runs as the init (and only) process of a libvirt LXC domain, or as a
 * plain process inside a network namespace.  It waits for both interfaces to
 * appear (LXC adds them a moment after init starts), brings them up, puts them
 * in promiscuous mode and forwards until SIGTERM or SIGINT.
 *
 * Frames are read and written with a virtio-net header (PACKET_VNET_HDR), so
 * GSO super-frames and frames whose checksum is still to be filled in (both
 * common on veth) pass through intact: TCP (iperf3) works through it.
 *
 * usage: xtc-forwarder [-w WORK] [-f FACTOR] [-r RCVBUF] [-t WAIT_S] IF_A IF_B
 *   -w WORK    busy-work iterations per forwarded frame (default 0)
 *   -f FACTOR  per-frame work factor, > 0 and <= 100: the busy work per frame is
 *              round(FACTOR * WORK) iterations (default 1: exactly WORK).  It stands
 *              for a cheaper (FACTOR < 1) or dearer (FACTOR > 1) forwarder.
 *   -r RCVBUF  receive buffer of each port's socket, bytes, 4096..2^30, as the kernel
 *              counts it (SO_RCVBUF reads RCVBUF back; set with SO_RCVBUFFORCE, or SO_RCVBUF
 *              capped at twice net.core.rmem_max without CAP_NET_ADMIN; default: the
 *              kernel's, net.core.rmem_default).  A frame that arrives while the socket's queue holds
 *              RCVBUF bytes is dropped; a larger buffer rides out the moments the forwarder
 *              does not run (another process holds the CPU, or its cap has run out).
 *   -t WAIT_S  give up if the interfaces are not there after WAIT_S s (default: wait forever)
 *
 * Exit status: 0 on SIGTERM/SIGINT, 1 on a usage or setup error.  Counters
 * (frames forwarded each way, frames dropped on send) are printed to stderr
 * on exit.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/if_packet.h>
#include <linux/virtio_net.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 32                       /* frames read from one socket per wake-up */
#define BUF_BYTES (65536 + 256)        /* a GSO frame plus the virtio-net header */

static volatile sig_atomic_t stop_requested;
static volatile uint64_t work_sink;    /* keeps the busy work from being optimised away */

static void on_signal(int sig) { (void)sig; stop_requested = 1; }

static void busy_work(unsigned long iters, const unsigned char *frame, size_t len)
{
    uint64_t h = 1469598103934665603ULL;  /* FNV-1a over the header bytes, repeated */
    size_t n = len < 64 ? len : 64;
    for (unsigned long i = 0; i < iters; i++)
        h = (h ^ frame[i % (n ? n : 1)]) * 1099511628211ULL;
    work_sink += h;
}

static int set_up_promisc(int ctl, const char *ifname)
{
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    strncpy(ifr.ifr_name, ifname, IFNAMSIZ - 1);
    if (ioctl(ctl, SIOCGIFFLAGS, &ifr) < 0)
        return -1;
    ifr.ifr_flags |= IFF_UP | IFF_PROMISC;
    return ioctl(ctl, SIOCSIFFLAGS, &ifr);
}

static int open_port(const char *ifname, unsigned ifindex, int rcvbuf)
{
    int one = 1;
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL));
    if (fd < 0)
        return -1;
    /* Never see our own transmissions (kernel >= 4.20), and carry GSO/checksum state. */
    (void)setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
    if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) < 0)
        goto fail;
    /* The kernel doubles the value asked (room for its bookkeeping): ask half of it. */
    int half = rcvbuf / 2;
    if (rcvbuf > 0 && setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &half, sizeof half) < 0 &&
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &half, sizeof half) < 0)
        goto fail;
    struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL),
                              .sll_ifindex = (int)ifindex};
    if (bind(fd, (struct sockaddr *)&sll, sizeof sll) < 0)
        goto fail;
    return fd;
fail:
    fprintf(stderr, "xtc-forwarder: %s: %s\n", ifname, strerror(errno));
    close(fd);
    return -1;
}

int main(int argc, char **argv)
{
    unsigned long work = 0;
    double factor = 1.0;
    long wait_s = -1;
    long rcvbuf = 0;
    int opt;
    while ((opt = getopt(argc, argv, "w:f:r:t:")) != -1) {
        char *end;
        if (opt == 'w') {
            work = strtoul(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || *optarg == '-') goto usage;
        } else if (opt == 'f') {
            factor = strtod(optarg, &end);
            if (*optarg == '\0' || *end != '\0' || !(factor > 0.0 && factor <= 100.0)) goto usage;
        } else if (opt == 'r') {
            rcvbuf = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || rcvbuf < 4096 || rcvbuf > (1L << 30)) goto usage;
        } else if (opt == 't') {
            wait_s = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || wait_s < 0) goto usage;
        } else {
            goto usage;
        }
    }
    if (argc - optind != 2 || strcmp(argv[optind], argv[optind + 1]) == 0)
        goto usage;
    const char *names[2] = {argv[optind], argv[optind + 1]};
    const unsigned long base_work = work;
    if (factor != 1.0)  /* factor 1 leaves WORK exactly as given */
        work = (unsigned long)(factor * (double)base_work + 0.5);  /* rounded */

    struct sigaction sa = {.sa_handler = on_signal};  /* no SA_RESTART: poll returns EINTR */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* Wait for both interfaces (LXC moves them into the container after init starts). */
    unsigned idx[2] = {0, 0};
    const struct timespec tick = {0, 50 * 1000 * 1000};
    for (long waited_ms = 0; !stop_requested; waited_ms += 50) {
        idx[0] = if_nametoindex(names[0]);
        idx[1] = if_nametoindex(names[1]);
        if (idx[0] && idx[1])
            break;
        if (wait_s >= 0 && waited_ms >= wait_s * 1000) {
            fprintf(stderr, "xtc-forwarder: interfaces %s and %s not both present after %ld s\n",
                    names[0], names[1], wait_s);
            return 1;
        }
        nanosleep(&tick, NULL);
    }
    if (stop_requested)
        return 0;

    /* Sockets first, then the links up: once a link is up (which the lab waits for),
     * no frame that arrives on it is missed. */
    int fds[2] = {-1, -1};
    for (int i = 0; i < 2; i++)
        if ((fds[i] = open_port(names[i], idx[i], (int)rcvbuf)) < 0)
            return 1;
    int ctl = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    for (int i = 0; i < 2; i++) {
        if (ctl < 0 || set_up_promisc(ctl, names[i]) < 0) {
            fprintf(stderr, "xtc-forwarder: cannot bring %s up: %s\n", names[i], strerror(errno));
            return 1;
        }
    }
    close(ctl);
    int rb = 0;
    socklen_t rblen = sizeof rb;
    getsockopt(fds[0], SOL_SOCKET, SO_RCVBUF, &rb, &rblen);
    fprintf(stderr, "xtc-forwarder: forwarding %s <-> %s, work %lu (factor %g of %lu), receive buffer %d bytes\n",
            names[0], names[1], work, factor, base_work, rb);

    /* One batch of frames per wake-up and direction: a recvmmsg and a sendmmsg call. */
    static unsigned char bufs[BATCH][BUF_BYTES];
    static struct iovec iov[BATCH];
    static struct sockaddr_ll from[BATCH];
    static struct mmsghdr in[BATCH], out[BATCH];
    for (int n = 0; n < BATCH; n++)
        iov[n] = (struct iovec){.iov_base = bufs[n], .iov_len = BUF_BYTES};
    const size_t hdr = sizeof(struct virtio_net_hdr);
    uint64_t fwd[2] = {0, 0}, dropped = 0;
    struct pollfd pfd[2] = {{.fd = fds[0], .events = POLLIN}, {.fd = fds[1], .events = POLLIN}};
    while (!stop_requested) {
        if (poll(pfd, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            perror("xtc-forwarder: poll");
            return 1;
        }
        for (int i = 0; i < 2; i++) {
            if (pfd[i].revents & POLLERR) {  /* e.g. ENETDOWN: reading the error clears it */
                int err;
                socklen_t errlen = sizeof err;
                getsockopt(fds[i], SOL_SOCKET, SO_ERROR, &err, &errlen);
            }
            if (!(pfd[i].revents & POLLIN))
                continue;
            for (int n = 0; n < BATCH; n++) {
                iov[n].iov_len = BUF_BYTES;
                in[n].msg_hdr = (struct msghdr){.msg_name = &from[n], .msg_namelen = sizeof from[n],
                                                .msg_iov = &iov[n], .msg_iovlen = 1};
            }
            int got = recvmmsg(fds[i], in, BATCH, MSG_DONTWAIT, NULL);
            int keep = 0;
            for (int n = 0; n < got; n++) {
                if (from[n].sll_pkttype == PACKET_OUTGOING || in[n].msg_len <= hdr)
                    continue;  /* own frames (kernels without PACKET_IGNORE_OUTGOING), runts */
                busy_work(work, bufs[n] + hdr, in[n].msg_len - hdr);
                iov[n].iov_len = in[n].msg_len;
                out[keep++].msg_hdr = (struct msghdr){.msg_iov = &iov[n], .msg_iovlen = 1};
            }
            for (int sent = 0; sent < keep;) {
                int r = sendmmsg(fds[1 - i], out + sent, (unsigned)(keep - sent), MSG_DONTWAIT);
                if (r <= 0) {  /* ENOBUFS/EAGAIN: drop the frame at the head and go on */
                    dropped++;
                    sent++;
                } else {
                    fwd[i] += (uint64_t)r;
                    sent += r;
                }
            }
        }
    }
    fprintf(stderr, "xtc-forwarder: stopped; %s->%s %llu, %s->%s %llu, dropped %llu\n",
            names[0], names[1], (unsigned long long)fwd[0], names[1], names[0],
            (unsigned long long)fwd[1], (unsigned long long)dropped);
    return 0;

usage:
    fprintf(stderr, "usage: %s [-w WORK] [-f FACTOR] [-r RCVBUF] [-t WAIT_S] IF_A IF_B\n", argv[0]);
    return 1;
}
