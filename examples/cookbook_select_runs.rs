//! Cookbook: select runs with SQL, then walk each one's steps.
//!
//! ```text
//! cargo run --release --example cookbook_select_runs -- PACK
//! ```
//!
//! The selection is SQL over the pack's `runs` and `run_details` tables (what `--where` takes on
//! the command line); here the deeper searches' runs that scored above a threshold, given as a
//! parameter. Each run's rows come back in step order.

use dataset_packer::{Pack, Param};

fn main() -> dataset_packer::Result<()> {
    let path = std::env::args_os()
        .nth(1)
        .expect("usage: cookbook_select_runs PACK");
    let pack = Pack::open(&path)?;

    let min_score = Param::parse("min_score=2500").expect("a valid parameter");
    let ids = pack.select_with("depth = 7 AND max_score > :min_score", &[min_score])?;

    let mut rows = 0;
    for &id in &ids {
        let run = pack.run(id)?;
        // How often the search's favourite move was the one played.
        let agreed = run
            .steps()
            .filter(|step| {
                let evs = step.branch_evs();
                let legal = step.legal();
                let best = (0..4)
                    .filter(|&m| legal[m])
                    .max_by(|&a, &b| evs[a].total_cmp(&evs[b]));
                best == Some(usize::from(step.move_dir()))
            })
            .count();
        println!(
            "run {id}: {} steps, best move played {agreed} times",
            run.len()
        );
        rows += run.len();
    }
    println!("selected {} runs, {rows} rows", ids.len());
    Ok(())
}
