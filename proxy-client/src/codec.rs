//! The codec of the generated gRPC code: prost, with small per-RPC buffers.
//!
//! tonic allocates a codec buffer for every RPC up front, 8 KiB by default for each direction, and grows it in steps
//! of that size. These messages are a few hundred bytes, so with many RPCs in flight (256 volumes staged at once: a
//! CSI RPC and a host call each) the default buffers are most of the memory they hold. One KiB fits nearly every
//! message; a larger one (a node's full disk list) grows the buffer in 1 KiB steps.
//!
//! (The same few lines are in `csi` and in `proxy-client`, which know nothing of each other.)

use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// The initial size and growth step of each RPC's encode and decode buffers.
pub const BUFFER_SIZE: usize = 1024;

/// tonic's `yield_threshold` default (only streaming RPCs batch up to it).
const YIELD_THRESHOLD: usize = 32 * 1024;

/// [`ProstCodec`] with [`BUFFER_SIZE`] buffers.
#[derive(Debug)]
pub struct SmallBuffers<T, U>(PhantomData<fn() -> (T, U)>);

impl<T, U> Default for SmallBuffers<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

fn settings() -> BufferSettings {
    BufferSettings::new(BUFFER_SIZE, YIELD_THRESHOLD)
}

impl<T, U> Codec for SmallBuffers<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<T, U>::raw_decoder(settings())
    }
}
