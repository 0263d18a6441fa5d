//! Unsigned providers (YooKassa): nothing to verify. Config validation
//! requires such a source to list the provider's addresses in `allow_ips`.

use super::{Cover, Ctx, Defaults, Part, SchemeDef};
use crate::verify::provider::Provider;
use crate::verify::VerifyError;
use crate::primitives::crypto::{Algorithm, Encoding};
use crate::verify::sign::{Signed, Signer};

pub struct Unsigned;

impl SchemeDef for Unsigned {
    const SUMMARY: &'static str = "none: the provider does not sign; `allow_ips` required";

    const DEFAULTS: Defaults = Defaults {
        needs_secret: false,
        needs_allow_ips: true,
        ..Defaults::keyed(false, Algorithm::Sha256, Encoding::Hex)
    };

    fn covers(_: &Provider, _: Part<'_>) -> Cover {
        Cover::Unsigned
    }

    fn verify(_ctx: &Ctx<'_, '_>) -> Result<Option<usize>, VerifyError> {
        Ok(None)
    }

    fn sign(_s: &Signer<'_>, _out: &mut Signed) -> Result<(), String> {
        Ok(())
    }
}
