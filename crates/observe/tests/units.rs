//! The balancer's size and rate flags read sizes with the workspace's one
//! grammar: `4GB` is 4 x 10^9 bytes here as in `verify --max-memory` and
//! request JSON, `4G` and `4GiB` are 4 x 2^30.

use numaplace_observe::units::{parse_bytes, parse_rate};

#[test]
fn decimal_and_binary_sizes_mean_what_the_rest_of_numaplace_means() {
    assert_eq!(parse_bytes("4GB"), Ok(4_000_000_000));
    assert_eq!(parse_bytes("4G"), Ok(4 << 30));
    assert_eq!(parse_bytes("4GiB"), Ok(4 << 30));
    assert_eq!(parse_bytes("1.5MiB"), Ok(3 << 19));
    assert_eq!(parse_rate("100MB/s"), Ok(100_000_000));
    assert_eq!(parse_rate("256MiB/s"), Ok(256 << 20));
}

#[test]
fn refusals_name_the_text_and_the_reason() {
    let e = parse_bytes("16 gb").expect_err("lower-case gb is not a unit");
    assert!(e.to_string().starts_with("\"16 gb\" is not a valid size: unknown unit `gb`"), "{e}");
    let e = parse_bytes("-1MiB").expect_err("negative");
    assert!(e.to_string().contains("negative"), "{e}");
    let e = parse_rate("99999999999EiB/s").expect_err("overflow");
    assert!(e.to_string().starts_with("\"99999999999EiB/s\" is not a valid rate"), "{e}");
    assert!(e.to_string().contains("more than 16 EiB"), "{e}");
}
