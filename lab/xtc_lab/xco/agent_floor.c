/* The least an XCo agent's hot path can cost on this kernel: agent_floor.py's C reference.
 *
 * It does, per slice, exactly the kernel work of the agent's timeslice turn and nothing else:
 *   1. sleep in select() until the controller's directive arrives (UDP, one datagram a slice);
 *   2. read it and take its start time (protocol 1: u64 start_us at byte 29, big-endian);
 *   3. sleep until that start (clock_nanosleep, absolute, CLOCK_REALTIME);
 *   4. send the turn's batch of TBF changes (the gate's own messages: one closes the last
 *      destination, one opens the next) in one send() on a NETLINK_ROUTE socket, with a fresh
 *      sequence number per message and no ACK asked, as TcGate.set_states does, then send the wake
 *      frame and one drain frame on the packet socket, then read any error queued (MSG_DONTWAIT);
 *   5. ask the HTB root for its counters (RTM_GETQDISC with NLM_F_ECHO) and read the answer:
 *      the agent's per-slice "quiet" probe.
 * No decoding, no decisions, no logging: what is left of the agent when everything but the
 * system calls is free.  Its CPU time over the run (getrusage) is the floor of any agent that
 * wakes for the directive and again at the slice's start.
 *
 * Usage: agent_floor PORT NETNS_PATH IFINDEX MSGFILE SECONDS
 *   PORT: UDP port on 127.0.0.1 for the directives (opened before entering the namespace; 0: any
 *     free port, printed first as {"port": N} on a line of its own);
 *   NETNS_PATH: /run/netns/NAME, the namespace of the gated device;
 *   MSGFILE: the messages, written by agent_floor.py: u32 count of turns, then per turn
 *     u32 batch length, u32 number of sequence offsets, the offsets (u32 each), the batch;
 *     then u32 length and the GETQDISC request; then u32 length and the wake frame.
 * Prints one JSON line: slices, wakeups, cpu_s, late (starts reached after they were due),
 * ignored (datagrams that were not a timeslice directive starting within a second).
 * FLOOR_SKIP (environment) leaves steps out, to see what each costs: any of "s" (no sleep until
 * the start: everything at the directive's arrival), "n" (no TBF changes), "p" (no frames),
 * "q" (no counter probe).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <linux/netlink.h>
#include <net/ethernet.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_TURNS 64
#define MAX_OFFS 16

struct turn {
    uint32_t len, n_offs, offs[MAX_OFFS];
    unsigned char *batch;
};

static void die(const char *what) {
    perror(what);
    exit(1);
}

static uint32_t rd32(FILE *f) {
    uint32_t v;
    if (fread(&v, 4, 1, f) != 1) {
        fprintf(stderr, "agent_floor: short message file\n");
        exit(2);
    }
    return v;
}

static unsigned char *rdbuf(FILE *f, uint32_t n) {
    unsigned char *b = malloc(n);
    if (!b || fread(b, 1, n, f) != n) {
        fprintf(stderr, "agent_floor: short message file\n");
        exit(2);
    }
    return b;
}

static int64_t now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: agent_floor PORT NETNS_PATH IFINDEX MSGFILE SECONDS\n");
        return 2;
    }
    int port = atoi(argv[1]), ifindex = atoi(argv[3]);
    double seconds = atof(argv[5]);
    const char *skip = getenv("FLOOR_SKIP");
    if (!skip) skip = "";
    int no_sleep = strchr(skip, 's') != NULL, no_nl = strchr(skip, 'n') != NULL;
    int no_frames = strchr(skip, 'p') != NULL, no_probe = strchr(skip, 'q') != NULL;

    FILE *f = fopen(argv[4], "rb");
    if (!f) die("message file");
    uint32_t n_turns = rd32(f);
    if (n_turns == 0 || n_turns > MAX_TURNS) {
        fprintf(stderr, "agent_floor: bad turn count %u\n", n_turns);
        return 2;
    }
    struct turn turns[MAX_TURNS];
    for (uint32_t i = 0; i < n_turns; i++) {
        turns[i].len = rd32(f);
        turns[i].n_offs = rd32(f);
        if (turns[i].n_offs > MAX_OFFS) {
            fprintf(stderr, "agent_floor: too many messages in a turn\n");
            return 2;
        }
        for (uint32_t k = 0; k < turns[i].n_offs; k++) turns[i].offs[k] = rd32(f);
        turns[i].batch = rdbuf(f, turns[i].len);
    }
    uint32_t qlen = rd32(f);
    unsigned char *query = rdbuf(f, qlen);
    uint32_t wlen = rd32(f);
    unsigned char *wake = rdbuf(f, wlen);
    fclose(f);

    int udp = socket(AF_INET, SOCK_DGRAM, 0);
    if (udp < 0) die("udp socket");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(udp, (struct sockaddr *)&a, sizeof a) < 0) die("udp bind");
    socklen_t alen = sizeof a;
    if (getsockname(udp, (struct sockaddr *)&a, &alen) < 0) die("getsockname");
    printf("{\"port\": %d}\n", ntohs(a.sin_port));
    fflush(stdout);

    int ns = open(argv[2], O_RDONLY);
    if (ns < 0) die("netns");
    if (setns(ns, CLONE_NEWNET) < 0) die("setns");
    close(ns);
    int nl = socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE);
    if (nl < 0) die("netlink socket");
    struct sockaddr_nl snl = {.nl_family = AF_NETLINK};
    if (bind(nl, (struct sockaddr *)&snl, sizeof snl) < 0) die("netlink bind");
    int one = 1;
    setsockopt(nl, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one);
    int pk = socket(AF_PACKET, SOCK_RAW, 0);
    if (pk < 0) die("packet socket");
    struct sockaddr_ll ll = {.sll_family = AF_PACKET, .sll_ifindex = ifindex, .sll_halen = ETH_ALEN};
    memcpy(ll.sll_addr, wake, ETH_ALEN);

    unsigned char buf[65536], dg[2048];
    uint32_t seq = 1;
    long slices = 0, wakeups = 0, late = 0, ignored = 0;
    int64_t end = now_us() + (int64_t)(seconds * 1e6);
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    while (now_us() < end) {
        fd_set rd;
        FD_ZERO(&rd);
        FD_SET(udp, &rd);
        struct timeval tv = {.tv_sec = 0, .tv_usec = 500000};
        int n = select(udp + 1, &rd, NULL, NULL, &tv);
        wakeups++;
        if (n <= 0) continue;
        ssize_t got = recv(udp, dg, sizeof dg, 0);
        /* a protocol-1 timeslice directive: "XC", version 1, type 6, kind 0, 41 bytes */
        if (got != 41 || dg[0] != 'X' || dg[1] != 'C' || dg[2] != 1 || dg[3] != 6 || dg[24] != 0) {
            ignored++;
            continue;
        }
        uint64_t start = 0;
        for (int k = 0; k < 8; k++) start = (start << 8) | dg[29 + k];
        int64_t t = now_us();
        if ((int64_t)start - t > 1000000) {  /* not this run's: never sleep on it */
            ignored++;
            continue;
        }
        if (no_sleep) {
        } else if ((int64_t)start > t) {
            struct timespec ts = {.tv_sec = (time_t)(start / 1000000), .tv_nsec = (long)(start % 1000000) * 1000};
            clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL);
            wakeups++;
        } else {
            late++;
        }
        struct turn *tr = &turns[slices % n_turns];
        for (uint32_t k = 0; k < tr->n_offs; k++) {
            uint32_t s = seq++;
            memcpy(tr->batch + tr->offs[k], &s, 4);
        }
        if (!no_nl && send(nl, tr->batch, tr->len, 0) < 0) die("netlink send");
        for (int k = 0; k < (no_frames ? 0 : 2); k++)  /* the wake frame, and a drain frame */
            if (sendto(pk, wake, wlen, 0, (struct sockaddr *)&ll, sizeof ll) < 0 && errno != ENOBUFS) die("frame");
        while (recv(nl, buf, sizeof buf, MSG_DONTWAIT) > 0) {
            struct nlmsghdr *h = (struct nlmsghdr *)buf;
            if (h->nlmsg_type == NLMSG_ERROR && ((struct nlmsgerr *)NLMSG_DATA(h))->error) {
                fprintf(stderr, "agent_floor: the kernel refused a change: %d\n", ((struct nlmsgerr *)NLMSG_DATA(h))->error);
                return 1;
            }
        }
        if (no_probe) {
            slices++;
            continue;
        }
        uint32_t qs = seq++;
        memcpy(query + 8, &qs, 4);
        if (send(nl, query, qlen, 0) < 0) die("netlink query");
        for (;;) {  /* the echoed root qdisc */
            ssize_t m = recv(nl, buf, sizeof buf, 0);
            if (m < 0) die("netlink recv");
            struct nlmsghdr *h = (struct nlmsghdr *)buf;
            if (h->nlmsg_seq == qs) break;
        }
        slices++;
    }
    getrusage(RUSAGE_SELF, &r1);
    double cpu = (r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) + (r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) / 1e6 +
                 (r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) + (r1.ru_stime.tv_usec - r0.ru_stime.tv_usec) / 1e6;
    printf("{\"slices\": %ld, \"wakeups\": %ld, \"late\": %ld, \"ignored\": %ld, \"cpu_s\": %.6f, \"seconds\": %.3f}\n",
           slices, wakeups, late, ignored, cpu, seconds);
    return 0;
}
