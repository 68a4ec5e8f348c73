/* x as the device's activation quantizer writes it (mk_block_quantize_x), for the host tests of the int8 dots. */
#ifndef MK_XQ_HOST_H
#define MK_XQ_HOST_H

#include <math.h>
#include <stdio.h>
#include <vector>

/* Include after megakernel/quant8.cuh. Per group of 32 inputs of x: the scale, the three int8
 * levels (q: (group, level, 32)) and their sums; the scale is max|x| / 127 over the span of `span`
 * inputs that holds the group (32: the group's own; the chunk's few-token tiles take 256). Returns
 * the number of inputs whose levels miss x by more than float rounding allows (the first few are
 * printed). */
static inline int mk_test_make_xq(const std::vector<float> &x, std::vector<int8_t> &q,
                                  std::vector<struct mk_xgroup> &grp, size_t span = 32) {
    const size_t ng = x.size() / 32;
    int bad = 0;
    q.assign(96 * ng + 64, 0);
    grp.assign(ng, mk_xgroup{});
    for (size_t g = 0; g < ng; g++) {
        float amax = 0.0f;
        const size_t lo = 32 * g / span * span;
        for (size_t i = lo; i < lo + span && i < x.size(); i++) amax = fmaxf(amax, fabsf(x[i]));
        grp[g].d = amax / 127.0f;
        for (int i = 0; i < 32; i++) {
            int l[3];
            mk_xq_levels(x[32 * g + i], grp[g].d, l);
            for (int k = 0; k < 3; k++) {
                q[96 * g + 32 * k + i] = (int8_t)l[k];
                grp[g].s[k] += l[k];
            }
            /* x' = d (q1 + q2 / 254 + q3 / 254^2) is within half a third-level step (6.1e-8 of the
             * span's largest value) of x, plus the rounding of the first residual (half an ulp of x). */
            const double xr = (double)grp[g].d * (l[0] + (l[1] + l[2] / 254.0) / 254.0);
            if (fabs(xr - x[32 * g + i]) > 6.2e-8 * amax + 6e-8 * fabs(x[32 * g + i])) {
                if (bad < 5)
                    fprintf(stderr, "x %.9g written as %.9g (levels %d %d %d, d %.9g)\n", (double)x[32 * g + i], xr,
                            l[0], l[1], l[2], (double)grp[g].d);
                bad++;
            }
        }
    }
    return bad;
}

#endif
