//===- AddScalarPtx.h - A tiny real kernel for runtime tests ----*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// nvcc -ptx -arch=compute_75 of:
//   extern "C" __global__ void add_scalar(float *x, float value, unsigned n) {
//     unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
//     if (i < n) x[i] += value;
//   }
// PTX JIT-compiles on every newer device, so GPU tests need no nvcc.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TEST_ADDSCALARPTX_H
#define KILN_RUNTIME_TEST_ADDSCALARPTX_H

static const char *const kAddScalarPtx = R"PTX(
.version 9.0
.target sm_75
.address_size 64

	// .globl	add_scalar

.visible .entry add_scalar(
	.param .u64 add_scalar_param_0,
	.param .f32 add_scalar_param_1,
	.param .u32 add_scalar_param_2
)
{
	.reg .pred 	%p<2>;
	.reg .f32 	%f<4>;
	.reg .b32 	%r<6>;
	.reg .b64 	%rd<5>;


	ld.param.u64 	%rd1, [add_scalar_param_0];
	ld.param.f32 	%f1, [add_scalar_param_1];
	ld.param.u32 	%r2, [add_scalar_param_2];
	mov.u32 	%r3, %ctaid.x;
	mov.u32 	%r4, %ntid.x;
	mov.u32 	%r5, %tid.x;
	mad.lo.s32 	%r1, %r3, %r4, %r5;
	setp.ge.u32 	%p1, %r1, %r2;
	@%p1 bra 	$L__BB0_2;

	cvta.to.global.u64 	%rd2, %rd1;
	mul.wide.u32 	%rd3, %r1, 4;
	add.s64 	%rd4, %rd2, %rd3;
	ld.global.f32 	%f2, [%rd4];
	add.f32 	%f3, %f2, %f1;
	st.global.f32 	[%rd4], %f3;

$L__BB0_2:
	ret;

}
)PTX";

#endif // KILN_RUNTIME_TEST_ADDSCALARPTX_H
