//! RL.THROTTLE key max_burst count_per_period period [quantity]: redis-cell's
//! CL.THROTTLE, on our own `gcra:<tat_ns>` state or redis-cell's plain ns
//! integer.

use super::Call;
use crate::algo::gcra::Tat;
use crate::algo::state::{self, Layout};
use crate::algo::throttle;
use crate::args;
use crate::error::RlError;
use crate::num::parse_i64;
use crate::receipt::Source;
use crate::store::Key;
use crate::{clock, reply};

pub fn throttle(call: &Call) -> Result<(), RlError> {
    let (params, quantity) = args::throttle(call.args)?;
    let now = clock::now();
    let meter = params.meter(now.ms)?;
    let name = call.key();
    let mut key = Key::write(call.ctx, name);
    let found = match key.read_string()? {
        None => None,
        // Our own format, decoded here rather than through the algorithm
        // table: this command only ever reads GCRA state.
        Some(bytes) => match state::decode::<Tat>(bytes) {
            Some(state) => Some(state),
            None => Some(
                Tat {
                    tat_ns: i128::from(parse_i64(bytes).ok_or(RlError::BadState("gcra"))?),
                }
                .stored(),
            ),
        },
    };
    let before = found.map(|state| (state, key.expires_at()));
    let (answer, write) = throttle::throttle(before, &meter, quantity, now);
    super::write(call.ctx, &mut key, name, write, before);
    drop(key);
    let allowed = !answer.limited;
    super::record(
        call.ctx,
        name,
        Source::Throttle,
        (allowed, false),
        answer.retry_after_ms,
        quantity,
    );
    reply::throttle(call.ctx, &answer);
    Ok(())
}
