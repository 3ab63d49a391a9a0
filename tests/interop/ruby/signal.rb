# Sends a remote signal through Sidekiq 6.4's own API: Sidekiq::Process#quiet! or #stop!
# (ARGV[1]) to the process ARGV[0] as Sidekiq::ProcessSet lists it; prints whom it reached.
require 'json'
require 'sidekiq/api'

reached = Sidekiq::ProcessSet.new.select { |process| process.identity == ARGV[0] }
reached.each { |process| process.public_send(ARGV[1]) }
puts JSON.generate(reached.map(&:identity))
