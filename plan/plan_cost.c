/* plan/plan_cost.c — traffic and time of one rank role (plan.h).
 *
 * Traffic is counted as comm.h counts it (nccl-tests' bus model: what a rank
 * sends), collective by collective as the step issues them, so that a run's
 * comm_bytes_by_axis checks it. Time is a sum of rates the machine file
 * states: nothing here is fitted to a run.
 */
#include "plan.h"

#include <math.h>
#include <string.h>

/* One kind of call an axis makes: `times` collectives of `kind` over a
 * full buffer of `buf` bytes of `type` among `ranks` (or point-to-point
 * sends: kind SEND; HALVES: as many reduce-scatters as allgathers, sequence
 * parallelism's), issued as messages of `msg` bytes each (ZeRO's units
 * of a whole pass), which is what a link's measured rate depends on. */
enum { SEND = MACHINE_COLLECTIVES, HALVES, AXIS_MAX_CALLS = 12 };

struct axis_call {
    int kind; /* enum machine_collective, SEND or HALVES */
    enum machine_precision type;
    uint64_t buf;
    double msg, times;
    int ranks;
};

/* Bytes and ring steps of one axis, added collective by collective, and
 * the calls themselves, for a link that states its rates by size. */
struct axis_load {
    uint64_t bytes;
    double steps; /* latency-bound hops: n - 1 per reduce-scatter/allgather, 2(n-1) per allreduce */
    int n_calls;
    struct axis_call call[AXIS_MAX_CALLS];
};

/* Bytes a rank sends in one call over n ranks (comm.h's counters,
 * fractions of a byte dropped). */
static uint64_t bus_bytes(int kind, uint64_t buf, int n)
{
    if (kind == SEND)
        return buf;
    const uint64_t hops = kind == MACHINE_ALLREDUCE ? 2 * (uint64_t)(n - 1) : (uint64_t)(n - 1);
    return hops * buf / (uint64_t)n;
}

static double steps_of(int kind, int n)
{
    return kind == MACHINE_ALLREDUCE ? 2.0 * (n - 1) : kind == SEND ? 1.0 : n - 1.0;
}

static void add_call(struct axis_load *a, int kind, enum machine_precision type, uint64_t buf,
                     double msg, int n, double times)
{
    if ((kind != SEND && n < 2) || times <= 0.0)
        return;
    a->bytes += (uint64_t)(times * (double)bus_bytes(kind, buf, n));
    a->steps += times * steps_of(kind, n);
    ZT_ASSERT(a->n_calls < AXIS_MAX_CALLS);
    a->call[a->n_calls++] = (struct axis_call){kind, type, buf, msg, times, n};
}

static void add_allreduce(struct axis_load *a, enum machine_precision type, uint64_t buf, int n,
                          double times)
{
    add_call(a, MACHINE_ALLREDUCE, type, buf, (double)buf, n, times);
}

static void add_send(struct axis_load *a, uint64_t bytes, double times)
{
    add_call(a, SEND, MACHINE_FP32, bytes, (double)bytes, 2, times);
}

/* A link's measured bus bandwidth for `kind` over a `size`-byte buffer of
 * `type` (fp32's table for a type without one), interpolated in log size
 * and held at the ends; 0 where the link measured none. */
static double measured_busbw(const struct machine_link *link, int kind, enum machine_precision type,
                             double size)
{
    const struct machine_busbw_table *t =
        link->busbw[type].n ? &link->busbw[type] : &link->busbw[MACHINE_FP32];
    if (kind == SEND || t->n == 0)
        return 0.0;
    if (kind == HALVES) /* equal numbers of each: their harmonic mean */
        return 2.0 / (1.0 / measured_busbw(link, MACHINE_REDUCE_SCATTER, type, size) +
                      1.0 / measured_busbw(link, MACHINE_ALLGATHER, type, size));
    const struct machine_busbw *r = t->row;
    if (size <= r[0].bytes)
        return r[0].busbw[kind];
    for (int i = 1; i < t->n; i++)
        if (size <= r[i].bytes) {
            const double w = log(size / r[i - 1].bytes) / log(r[i].bytes / r[i - 1].bytes);
            return exp((1.0 - w) * log(r[i - 1].busbw[kind]) + w * log(r[i].busbw[kind]));
        }
    return r[t->n - 1].busbw[kind];
}

/* Seconds of an axis's calls on a link: at its measured rate by size and
 * type where it states one, else its bandwidth and latency per step. */
static double seconds_of(const struct axis_load *a, const struct machine_link *link)
{
    double s = 0.0;
    for (int i = 0; i < a->n_calls; i++) {
        const struct axis_call *c = &a->call[i];
        const double bus = (double)bus_bytes(c->kind, c->buf, c->ranks);
        const double rate = measured_busbw(link, c->kind, c->type, c->msg);
        s += c->times * (rate > 0.0
                             ? bus / rate
                             : bus / link->bandwidth + steps_of(c->kind, c->ranks) * link->latency);
    }
    return s;
}

/* The data-parallel axis's groups, as session_engine_config forms them:
 * ZeRO shards over the whole axis or, under HSDP (stages 1-3), over shard
 * groups of G consecutive ranks whose sums the R = D / G replicas then
 * allreduce; hpZ (stage 3) keeps a secondary copy in groups of H ranks,
 * which every gather but a unit's first of the step reads. */
enum data_group { GROUP_SHARD, GROUP_SECONDARY, GROUP_REPLICA, GROUP_COUNT };

struct data_groups {
    int size[GROUP_COUNT]; /* ranks; 1: the group does not exist */
    const struct machine_link *link[GROUP_COUNT];
    enum machine_precision grad_type, param_type; /* what the collectives carry */
};

/* The type of an element of esz bytes in a run computing in p. */
static enum machine_precision type_of(size_t esz, enum machine_precision p)
{
    return esz >= 4 ? MACHINE_FP32 : p == MACHINE_FP32 ? MACHINE_BF16 : p;
}

/* Ranks are numbered tensor-innermost, then data: a group of n consecutive
 * data-parallel ranks spans T x n ranks, a strided one the whole axis. */
static struct data_groups data_groups_of(const struct plan_model *pm, const struct plan_layout *l,
                                         const struct plan_role *r, const struct machine *m,
                                         int per_node, enum machine_precision p)
{
    const int D = l->dp * plan_context_size(l),
              G = pm->shard_group_size; /* ZeRO over data x context ranks */
    const int H = pm->hpz_partition_size;
    const int hsdp = l->zero_stage >= 1 && G > 0 && G < D && D % G == 0;
    const int hpz = l->zero_stage == 3 && H > 1 && D % H == 0;
    struct data_groups g = {.size = {hsdp ? G : D, hpz ? H : 1, hsdp ? D / G : 1}};
    const long span[GROUP_COUNT] = {(long)l->tp * g.size[GROUP_SHARD],
                                    (long)l->tp * g.size[GROUP_SECONDARY], (long)l->tp * D};
    for (int k = 0; k < GROUP_COUNT; k++)
        g.link[k] = span[k] > per_node ? &m->inter_node : &m->intra_node;
    g.grad_type = type_of(r->grad_esz, p);
    g.param_type = type_of(r->esz, p);
    return g;
}

/* The data-parallel axis, by group: the stage's gradient reduction and
 * parameter gathers, the replicas' allreduce of each shard (HSDP), and the
 * norm's one double. */
static void data_traffic(const struct plan_layout *l, const struct plan_role *r,
                         const struct data_groups *g, struct axis_load *a)
{
    const int G = g->size[GROUP_SHARD], H = g->size[GROUP_SECONDARY];
    const double units = r->units > 0 ? r->units : 1;
    const uint64_t grads = r->trainable_padded * r->grad_esz;
    const uint64_t params = r->trainable_padded * r->esz;
    /* each unit is a message of its own */
    const double unit_grads = (double)grads / units, unit_params = (double)params / units;
    const double unit_pass = (double)r->pass_bytes_forward / units;
    const enum machine_precision gt = g->grad_type, pt = g->param_type;
    struct axis_load *shard = &a[GROUP_SHARD];
    switch (l->zero_stage) {
    case 0:
        add_call(shard, MACHINE_ALLREDUCE, gt, grads, unit_grads, G, 1);
        return;
    case 1:
        add_call(shard, MACHINE_REDUCE_SCATTER, gt, grads, unit_grads, G, 1);
        add_call(shard, MACHINE_ALLGATHER, pt, params, unit_params, G, 1); /* regathered */
        break;
    case 2:
        add_call(shard, MACHINE_REDUCE_SCATTER, gt, grads, unit_grads, G, l->accum); /* each */
        add_call(shard, MACHINE_ALLGATHER, pt, params, unit_params, G, 1);
        break;
    default:
        /* each unit gathered every time a pass acquires it: under hpZ its
         * first gather of the step from the shard group, the rest from the
         * secondary */
        if (H > 1) {
            struct axis_load *second = &a[GROUP_SECONDARY];
            const size_t reuse = r->pass_bytes_forward - r->pass_bytes_distinct;
            add_call(shard, MACHINE_ALLGATHER, pt, r->pass_bytes_distinct, unit_pass, G, 1);
            add_call(second, MACHINE_ALLGATHER, pt, reuse, unit_pass, H, 1); /* used twice */
            add_call(second, MACHINE_ALLGATHER, pt, r->pass_bytes_forward, unit_pass, H,
                     l->accum - 1);
            add_call(second, MACHINE_ALLGATHER, pt, r->pass_bytes - r->pass_bytes_forward,
                     unit_pass, H, l->accum);
        } else {
            add_call(shard, MACHINE_ALLGATHER, pt, r->pass_bytes, unit_pass, G, l->accum);
        }
        add_call(shard, MACHINE_REDUCE_SCATTER, gt, grads, unit_grads, G, l->accum);
        break;
    }
    add_allreduce(&a[GROUP_REPLICA], gt, r->trainable_shard * r->grad_esz, g->size[GROUP_REPLICA],
                  1);
    add_allreduce(shard, MACHINE_FP32, sizeof(double), G, 1);
}

/* The exposed part of stages 2 and 3's data-parallel traffic: each micro
 * batch's passes walked unit by unit (plan_pass_exposed), the stage 3
 * gathers before each unit's forward and backward and the reduce-scatters
 * after each unit's backward, against that unit's share of the compute;
 * then what runs after the backward in the open: stage 2's regather of the
 * updated parameters, the replicas' allreduce and the norm's. */
static double data_exposed(const struct plan_model *pm, const struct plan_layout *l,
                           const struct plan_role *r, const struct data_groups *dg, double micro)
{
    const int n = r->units > 0 ? r->units : 1, G = dg->size[GROUP_SHARD];
    const int H = dg->size[GROUP_SECONDARY];
    struct axis_load fwd = {0}, fwd_later = {0}, bwd = {0}, reduce = {0}, open[GROUP_COUNT] = {{0}};
    const enum machine_precision gt = dg->grad_type, pt = dg->param_type;
    const uint64_t unit_grads = r->trainable_padded * r->grad_esz / (uint64_t)n;
    add_call(&reduce, MACHINE_REDUCE_SCATTER, gt, unit_grads, (double)unit_grads, G, 1);
    if (l->zero_stage >= 3) {
        const uint64_t f = r->pass_bytes_forward / (uint64_t)n;
        const uint64_t b = (r->pass_bytes - r->pass_bytes_forward) / (uint64_t)n;
        add_call(&fwd, MACHINE_ALLGATHER, pt, f, (double)f, G, 1);
        add_call(&fwd_later, MACHINE_ALLGATHER, pt, f, (double)f, H > 1 ? H : G, 1);
        /* the backward may gather a unit twice (its recompute): a message is still one unit */
        add_call(&bwd, MACHINE_ALLGATHER, pt, b, (double)f, H > 1 ? H : G, 1);
    } else {
        const uint64_t params = r->trainable_padded * r->esz;
        add_call(&open[GROUP_SHARD], MACHINE_ALLGATHER, pt, params, (double)params / n, G, 1);
    }
    add_allreduce(&open[GROUP_REPLICA], gt, r->trainable_shard * r->grad_esz,
                  dg->size[GROUP_REPLICA], 1);
    add_allreduce(&open[GROUP_SHARD], MACHINE_FP32, sizeof(double), G, 1);
    /* the forward is a third of a micro batch's compute, a recomputed one
     * a further third of the backward's share */
    const double recompute = l->ckpt_every > 0 ? 1.0 : 0.0;
    const double forward = micro / (3.0 + recompute), backward = micro - forward;
    const struct machine_link *shard = dg->link[GROUP_SHARD];
    const struct machine_link *later = H > 1 ? dg->link[GROUP_SECONDARY] : shard;
    const double rs = seconds_of(&reduce, shard), gf = seconds_of(&fwd, shard);
    const double gf_later = seconds_of(&fwd_later, later), gb = seconds_of(&bwd, later);
    const int depth = pm->prefetch_depth;
    /* under hpZ the first micro batch's forward gathers from the shard
     * group, the others' from the secondary */
    double exposed = plan_pass_exposed(n, forward / n, gf, 0.0, depth) +
                     (l->accum - 1) * plan_pass_exposed(n, forward / n, gf_later, 0.0, depth) +
                     l->accum * plan_pass_exposed(n, backward / n, gb, rs, depth);
    for (int k = 0; k < GROUP_COUNT; k++)
        exposed += seconds_of(&open[k], dg->link[k]);
    return exposed;
}

/* The tensor-parallel axis, per micro batch: each block's row-parallel
 * outputs and column-parallel input gradients (two each way), a recomputed
 * forward's again, the vocabulary-parallel embedding and loss. Under
 * sequence parallelism each allreduce becomes a reduce-scatter and an
 * allgather, the backward gathers each block's two inputs again for the
 * weight gradients, the head's input is gathered and its gradient
 * scattered, and the norms' weight gradients are summed. Activations move
 * in the compute type, the norms' and the loss's sums in fp32. */
static void tensor_traffic(const struct plan_model *pm, const struct plan_layout *l,
                           const struct plan_role *r, int sequence_parallel,
                           enum machine_precision p, struct axis_load *a)
{
    const enum machine_precision at = type_of(r->act_esz, p);
    const int T = l->tp;
    const uint64_t rows = (uint64_t)l->micro_batch * (uint64_t)pm->seq / plan_context_size(l);
    const uint64_t act = rows * (uint64_t)pm->embd * r->act_esz; /* in the compute type */
    const double recompute = l->ckpt_every > 0 ? 1.0 : 0.0, m = l->accum;
    if (!sequence_parallel) {
        const double n = r->blocks * 2.0 * (2.0 + recompute) + r->first + r->last;
        add_allreduce(a, at, act, T, n * m);
    } else {
        const double halves = r->blocks * (10.0 + 4.0 * recompute) + r->first + 3.0 * r->last;
        add_call(a, HALVES, at, act, (double)act, T, halves * m);
        const double norms = 2.0 * r->blocks + r->last;
        add_allreduce(a, MACHINE_FP32, (uint64_t)pm->embd * sizeof(float), T,
                      norms * pm->norm_vectors * m);
    }
    if (r->last) /* the loss: row maxima, sums of exponentials, target logits */
        add_allreduce(a, MACHINE_FP32, rows * sizeof(float), T, 3.0 * m);
    add_allreduce(a, MACHINE_FP32, sizeof(double), T, 1); /* the gradient norm's share */
}

/* The pipeline axis: a boundary forward and back per micro batch and
 * chunk (but out of the model's last chunk and into its first), the tied
 * embedding's gradients once a step, the norm's double. */
static void pipeline_traffic(const struct plan_layout *l, const struct plan_role *r,
                             struct axis_load *a)
{
    const uint64_t boundary = r->boundary * r->act_esz;
    const int v = r->chunks > 1 ? r->chunks : 1;
    if (l->pp == 1)
        return;
    add_send(a, boundary, (v - (r->last ? 1 : 0)) * (double)l->accum);
    add_send(a, boundary, (v - (r->first ? 1 : 0)) * (double)l->accum);
    if (r->tied_exchange)
        add_send(a, r->tied_elems * r->grad_esz, 1);
    add_allreduce(a, MACHINE_FP32, sizeof(double), l->pp, 1);
}

/* Ranks are numbered tensor-innermost, then data, then pipeline
 * (comm/layout.h): an axis's ring spans stride x size consecutive ranks,
 * and crosses nodes when that is more than a node holds. */
static int crosses_nodes(const struct plan_layout *l, enum plan_axis axis, int per_node)
{
    const int dp = l->dp * plan_context_size(l);
    const int size[] = {l->tp, l->pp, dp};
    const long span[] = {l->tp, (long)l->tp * dp * l->pp, (long)l->tp * dp};
    return size[axis] > 1 && span[axis] > per_node;
}

/* How many times over the node's ranks ask for its cores: `train` gives
 * each of R ranks max(1, cores / R) threads (coordinator/session.c), so
 * R x threads / cores, and 1 where the machine does not state its cores or
 * the ranks fit. device_share already divides a node's rates among its
 * ranks: this factor says only whether a rank's idle time is another's. */
static double oversubscription(const struct machine *m, int per_node)
{
    if (m->cores <= 0)
        return 1.0;
    const int threads = m->cores / per_node > 0 ? m->cores / per_node : 1;
    const double o = (double)per_node * threads / m->cores;
    return o > 1.0 ? o : 1.0;
}

/* A micro batch's 4-bit decodes: at the machine's rate on the rank's core,
 * or as the memory traffic of reading half a byte and writing an element. */
static double decode_seconds(const struct plan_role *r, const struct machine *m, int per_node,
                             double mem_rate)
{
    const double n = (double)r->decoded_elems;
    if (m->dequantize_4bit > 0)
        return n / (m->dequantize_4bit * plan_core_share(m, per_node));
    return n * (0.5 + (double)r->act_esz) / mem_rate;
}

/* The cores a rank's threads run on: train gives each of a node's ranks
 * cores / ranks threads, at least one (a share of one core beyond). */
static double rank_cores(const struct machine *m, int per_node)
{
    const int threads = m->cores / per_node;
    return (threads > 1 ? threads : 1) * plan_core_share(m, per_node);
}

/* Where the machine states its element-wise ops' rate on a core: that
 * on the rank's cores, bounded by its share of the memory's. */
static double elementwise_rate(const struct machine *m, int per_node, double mem_rate)
{
    if (!(m->elementwise_bandwidth > 0))
        return mem_rate;
    return fmin(mem_rate, m->elementwise_bandwidth * rank_cores(m, per_node));
}

/* Attention's products at the machine's measured rate on the rank's
 * cores, or at the GEMMs' where it states none. */
static double attention_seconds(const struct plan_role *r, const struct machine *m, int per_node,
                                enum machine_precision p, double flops_rate)
{
    const double rate =
        m->attention_flops[p] > 0 ? m->attention_flops[p] * rank_cores(m, per_node) : flops_rate;
    return r->attention_flops / rate;
}

/* The update reads and writes every state of the rank's range; where the
 * machine states the optimizer's rate on one core, it is the slower of
 * that and the traffic. */
static double update_seconds(const struct plan_model *pm, const struct plan_role *r,
                             const struct machine *m, int per_node, double mem_rate)
{
    const double traffic = 2.0 * (double)r->state_bytes / mem_rate;
    const double rate = machine_update_rate(m, pm->optimizer);
    const double work =
        rate > 0 ? (double)r->trainable_shard / (rate * plan_core_share(m, per_node)) : 0;
    return work > traffic ? work : traffic;
}

/* An NVMe offload reads and writes each rank's state file once a step
 * (shard/nvme.c); the node's ranks share its disk. A rank's one I/O thread
 * serves its window's reads and writes in order, a slot written out before
 * the next chunk is read into it, and the kernel holds back a writer once
 * its dirty pages pass a fifth of the free memory (vm.dirty_ratio), far
 * less than a step's files: the update waits for the node's reads and
 * writes together. 0 where the machine states no such bandwidth, or the
 * role has no file. */
static double nvme_seconds(const struct plan_role *r, double bandwidth, int per_node)
{
    return bandwidth > 0 ? (double)r->nvme_bytes * per_node / bandwidth : 0.0;
}

/* A 16-bit run's backward accumulates each trainable unit's weight
 * gradients in an fp32 view, zeroed first and cast back to the gradient
 * type after (shard/engine.c's grad_view_open and _close): 4 bytes
 * written, 4 read and one gradient element written, each micro batch. */
static double grad_view_seconds(const struct plan_role *r, double mem_rate)
{
    if (r->act_esz == 4)
        return 0.0;
    return (double)r->trainable_padded * (8.0 + (double)r->grad_esz) / mem_rate;
}

/* The step's passes over a rank's reduced gradients (shard/engine.c):
 * stages 2 and 3 add each micro batch's reduced shard into it (two read,
 * one written); then the norm reads it and the zeroing writes it. Bytes
 * of gradient elements, at the rank's share of the memory bandwidth. */
static double grad_pass_seconds(const struct plan_layout *l, const struct plan_role *r,
                                double mem_rate)
{
    const int sharded = l->zero_stage >= 2;
    const double elems = (double)(sharded ? r->trainable_shard : r->trainable_padded);
    return elems * (double)r->grad_esz * ((sharded ? 3.0 * l->accum : 0.0) + 2.0) / mem_rate;
}

/* Whether a rank's collectives inside its node are work of its own cores:
 * ranks that share a device (a CPU node's cores) copy each other's
 * buffers through shared memory, so no compute hides them. */
static int cores_copy(const struct machine *m, int per_node)
{
    return plan_device_share(m, per_node) > 1.0;
}

double plan_bubble(double busy, int pp, int accum, int chunks, double oversubscription)
{
    /* 1F1B and GPipe both idle P - 1 micro batches' time per step, the
     * interleaved schedule P - 1 chunks' (1/v of one): a stage's span is
     * busy (1 + (P-1)/(v m)). Oversubscribed o times, the node's cores run
     * the other ranks while one idles, so the span shrinks by o, down to
     * the busy time itself */
    const double v = chunks > 1 ? chunks : 1;
    const double span = busy * (1.0 + (double)(pp - 1) / (v * accum)) / oversubscription;
    return span > busy ? span - busy : 0.0;
}

/* model.init_from's load on the slowest rank (run_checkpoint.h's work):
 * one thread reads, transposes and encodes at the machine's rates; its
 * stores into the model states, and the scans of 4-bit blocks for their
 * scales alone (4 bytes an element), stream at the rank's share of the
 * memory; a cold file (a first load) comes off the disk at the rank's
 * share of it, where the machine states the disk's rate; under NVMe
 * offload the master goes to the file and back. Every rank of the node
 * loads at once, and nothing overlaps on a rank: its reads block. */
static double load_seconds(const struct plan_model *pm, const struct plan_role *r,
                           const struct machine *m, int per_node, double mem_rate, int cold)
{
    const struct run_import_work *w = &r->load_work;
    if (w->read == 0 || !(m->weights_read > 0) || !(m->weights_read_transposed > 0) ||
        (w->encoded && !(m->quantize_4bit > 0)))
        return NAN;
    const double core = plan_core_share(m, per_node);
    double t = ((double)(w->read - w->transposed) / m->weights_read +
                (double)w->transposed / m->weights_read_transposed +
                (w->encoded ? (double)w->encoded / m->quantize_4bit : 0.0)) /
                   core +
               ((double)w->stored + (double)w->scanned * sizeof(float)) / mem_rate;
    const double rd = m->nvme_read_bandwidth / per_node, wr = m->nvme_write_bandwidth / per_node;
    if (rd > 0 && cold)
        t += (double)w->read * pm->weights_file_esz / rd;
    if (w->master_nvme && rd > 0 && wr > 0)
        t += (double)w->master_nvme * sizeof(float) * (1.0 / wr + 1.0 / rd);
    return t;
}

/* A step of `passes` forward and backward passes (LOMO's measuring one)
 * computes and moves each pass's work that many times, and zeroes and
 * measures each unit's transient gradients in each; its update is once a
 * step. */
static void repeat_passes(struct plan_time *t, int passes)
{
    const double n = passes > 1 ? passes : 1;
    t->compute *= n;
    t->grad_passes *= n;
    t->matmul *= n;
    t->attention *= n;
    t->decode *= n;
    t->context *= n;
    for (int k = 0; k < PLAN_AXIS_COUNT; k++) {
        t->comm[k] *= n;
        t->exposed[k] *= n;
        t->bytes[k] = (uint64_t)((double)t->bytes[k] * n);
    }
}

void plan_cost(const struct plan_model *pm, const struct plan_layout *l, const struct plan_role *r,
               const struct machine *m, int per_node, enum machine_precision precision,
               struct plan_time *out)
{
    struct axis_load t[PLAN_AXIS_COUNT];
    memset(out, 0, sizeof *out);
    memset(t, 0, sizeof t);
    tensor_traffic(pm, l, r, l->sequence_parallel && l->tp > 1, precision, &t[PLAN_AXIS_TENSOR]);
    pipeline_traffic(l, r, &t[PLAN_AXIS_PIPELINE]);
    const struct data_groups dg = data_groups_of(pm, l, r, m, per_node, precision);
    struct axis_load data[GROUP_COUNT] = {{0}};
    data_traffic(l, r, &dg, data);

    const double share = plan_device_share(m, per_node);
    const double flops_rate = plan_matmul_rate(pm, l, r->blocks, r->last, m, precision, per_node);
    const double mem_rate = m->memory_bandwidth / share;
    const double ew_rate = elementwise_rate(m, per_node, mem_rate);
    /* the element-wise ops: the forward writes each activation, the
     * backward reads it and writes its gradient, a recomputed forward
     * writes it again */
    const double recompute = l->ckpt_every > 0 ? 1.0 : 0.0;
    const double act_traffic = (3.0 + recompute) * (double)r->act_pass_bytes / ew_rate;
    const double attention = attention_seconds(r, m, per_node, precision, flops_rate);
    const double matmul = (r->flops - r->attention_flops) / flops_rate + attention;
    const double decode = decode_seconds(r, m, per_node, mem_rate);
    const double micro = matmul + act_traffic + decode + grad_view_seconds(r, ew_rate);
    out->compute = micro * l->accum;
    out->matmul = matmul * l->accum;
    out->attention = attention * l->accum;
    out->decode = decode * l->accum;
    out->nvme = nvme_seconds(r, m->nvme_read_bandwidth, per_node) +
                nvme_seconds(r, m->nvme_write_bandwidth, per_node);
    out->optimizer = fmax(update_seconds(pm, r, m, per_node, mem_rate), out->nvme);
    out->grad_passes = grad_pass_seconds(l, r, ew_rate);
    for (int k = 0; k < PLAN_AXIS_COUNT; k++) {
        out->inter_node[k] = crosses_nodes(l, (enum plan_axis)k, per_node);
        const struct machine_link *link = out->inter_node[k] ? &m->inter_node : &m->intra_node;
        out->bytes[k] = t[k].bytes;
        out->comm[k] = seconds_of(&t[k], link);
    }
    for (int g = 0; g < GROUP_COUNT; g++) {
        out->bytes[PLAN_AXIS_DATA] += data[g].bytes;
        out->comm[PLAN_AXIS_DATA] += seconds_of(&data[g], dg.link[g]);
    }
    memcpy(out->exposed, out->comm, sizeof out->exposed);
    /* stages 2 and 3 reduce (and stage 3 gathers) inside the passes, hidden
     * as far as each unit's compute covers them; stages 0 and 1 reduce
     * after the backward, in the open */
    if (l->zero_stage >= 2 && l->dp * plan_context_size(l) > 1 &&
        !(cores_copy(m, per_node) && !out->inter_node[PLAN_AXIS_DATA])) {
        const int k = PLAN_AXIS_DATA;
        const double e = data_exposed(pm, l, r, &dg, micro);
        out->exposed[k] = e < out->comm[k] ? e : out->comm[k];
    }
    plan_context_cost(pm, l, r, m, flops_rate, per_node, out);
    repeat_passes(out, pm->passes);
    const double busy = out->compute + out->exposed[PLAN_AXIS_TENSOR] +
                        out->exposed[PLAN_AXIS_PIPELINE] + out->context;
    out->bubble = plan_bubble(busy, l->pp, l->accum, r->chunks, oversubscription(m, per_node));
    out->step =
        busy + out->bubble + out->exposed[PLAN_AXIS_DATA] + out->grad_passes + out->optimizer;
    out->load = load_seconds(pm, r, m, per_node, mem_rate, 1);
    out->load_cached = load_seconds(pm, r, m, per_node, mem_rate, 0);
}
